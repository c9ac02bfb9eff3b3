"""The raw material of the drafter's training prompts, written here: request templates by kind of task,
topics, personas, word-problem patterns, and passages of the Python documentation (pydoc_data, in every
Python install). Nothing here is taken from a benchmark's prompts.
"""

from __future__ import annotations

import random

TOPIC_TEMPLATES = (
    # writing
    "Write a short blog post about {topic}.",
    "Write a poem about {topic}.",
    "Write a persuasive email to a friend about {topic}.",
    "Write a product description for something related to {topic}.",
    "Draft a speech of about 150 words on {topic} for a school assembly.",
    "Write a short story in which {topic} plays an important role.",
    "Write a limerick about {topic}.",
    "Write a formal letter to a city council about {topic}.",
    "Compose a catchy slogan and a short advertisement about {topic}.",
    "Write a diary entry of someone who just learned about {topic}.",
    "Write the opening paragraph of a novel that involves {topic}.",
    "Write a short review of a documentary about {topic}.",
    # explaining (STEM, humanities)
    "Describe {topic} to a ten-year-old.",
    "Explain step by step how {topic} works.",
    "What are the main advantages and disadvantages of {topic}?",
    "Summarise the history of {topic} in a few paragraphs.",
    "List three common misconceptions about {topic} and correct them.",
    "Compare {topic} with something similar and explain the differences.",
    "What questions should a beginner ask about {topic}?",
    "Create a simple lesson plan for teaching {topic}.",
    "Give me five tips related to {topic}.",
    "How has {topic} changed over the last hundred years?",
    "What would happen if {topic} disappeared tomorrow?",
    "Explain the science behind {topic} in simple terms.",
    "What are the ethical questions raised by {topic}?",
    "Give an overview of {topic} with one example for each key idea.",
    "Why do people disagree about {topic}? Present both sides.",
    "Outline a five-minute presentation about {topic}.",
    "What careers are connected to {topic}, and what skills do they need?",
    "How would you explain {topic} to someone from the year 1800?",
    # roleplay-like
    "Pretend you are a tour guide and talk about {topic}.",
    "Imagine you are a journalist interviewing an expert on {topic}. Write the first three questions and answers.",
    "Act as a teacher and answer a student's question about {topic}.",
    "You are a skeptical scientist. Give your honest opinion on {topic}.",
    # reasoning, extraction, code, math
    "Extract the key facts about {topic} as a JSON object with three fields.",
    "Make a table with two columns comparing facts about {topic}.",
    "Write a Python function related to {topic} and explain it.",
    "Solve a simple math word problem about {topic}, showing each step.",
    "Give a multiple-choice quiz of three questions about {topic}, with the answers.",
    "Classify the following ideas about {topic} as facts or opinions, and explain your choice.",
)

TOPICS = (
    "renewable energy", "the water cycle", "machine learning", "the French revolution", "photosynthesis",
    "remote work", "electric cars", "the human immune system", "coffee", "the stock market", "volcanoes",
    "social media", "the Roman empire", "black holes", "healthy sleep", "recycling", "the printing press",
    "chess", "climate change", "public libraries", "vaccines", "the internet", "honey bees", "jazz music",
    "the moon landing", "budgeting money", "learning a new language", "ancient Egypt", "solar panels",
    "rainforests", "the theory of evolution", "city parks", "marathon training", "3D printing",
    "the Renaissance", "ocean tides", "cryptography", "baking bread", "the Olympic games", "earthquakes",
    "democracy", "smartphones", "quantum computing", "gardening", "the Great Wall of China", "time management",
    "plate tectonics", "public transport", "video games", "the periodic table", "sorting algorithms",
    "prime numbers", "interest rates", "probability", "job interviews", "bicycles", "mountain climbing",
    "friendship", "nutrition", "the solar system", "the Industrial Revolution", "Shakespeare's plays",
    "impressionist painting", "the Cold War", "supply and demand", "inflation", "minimum wage laws",
    "the human brain", "DNA", "antibiotics", "hurricanes", "glaciers", "coral reefs", "deserts", "wolves",
    "urban farming", "space tourism", "artificial intelligence in medicine", "self-driving cars", "blockchain",
    "online privacy", "open-source software", "databases", "computer networks", "the Pythagorean theorem",
    "fractions", "statistics in sports", "the speed of light", "magnetism", "electric circuits", "nuclear power",
    "wind turbines", "water purification", "the history of writing", "ancient Greece", "the Silk Road",
    "the Mayan civilisation", "world religions", "philosophy of happiness", "stoicism", "the scientific method",
    "fake news", "advertising", "minimalism", "fast fashion", "vegetarian diets", "team sports", "yoga",
    "mental health at work", "procrastination", "public speaking", "negotiation", "starting a small business",
    "customer service", "tourism in Japan", "the Amazon river", "the Alps", "Antarctica", "migration of birds",
    "dinosaurs", "the Big Bang", "telescopes", "the history of flight", "trains", "cargo ships", "bridges",
    "skyscrapers", "architecture of cathedrals", "classical music", "film making", "photography", "comic books",
    "board games", "origami", "knitting", "coffee shops", "street food", "the history of chocolate",
    "tea ceremonies", "wine making", "composting", "beekeeping", "dog training", "cats as pets",
    "the immune response to allergies", "exercise and memory", "the history of vaccines", "zero waste living",
)

PERSONAS = (
    "a pirate captain", "a medieval knight", "a detective in 1920s London", "a friendly robot", "a chef",
    "a football coach", "a kindergarten teacher", "an astronaut on the space station", "a grumpy librarian",
    "a travel agent", "a personal fitness trainer", "a museum curator", "a startup founder", "a park ranger",
    "a fortune teller", "a radio host", "a doctor", "a lawyer", "a poet", "a village blacksmith",
    "a customer support agent", "a wise old wizard", "a sports commentator", "a marine biologist",
)

PERSONA_ASKS = (
    "Introduce yourself and describe a typical day.",
    "Give me advice about my first week at a new job.",
    "Tell me what you think about modern technology.",
    "Describe the most exciting thing that ever happened to you.",
    "Explain how to stay calm under pressure.",
    "Answer my question: what should I eat for breakfast?",
    "Convince me to take up a new hobby.",
    "Describe your favourite place in the world.",
)

WORD_PROBLEMS = (
    "A shop sells {a} apples for {b} dollars each and {c} oranges for {d} dollars each. How much do all the "
    "fruits cost?",
    "A train travels {a} kilometres in {b} hours. What is its average speed? How far does it go in {c} hours?",
    "Tom has {a} marbles. He gives {b} to his sister and then buys {c} more. How many marbles does he have?",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter?",
    "If {a} workers build a wall in {b} days, how long would {c} workers take at the same rate?",
    "Solve for x: {a}x + {b} = {c}.",
    "What is {a} percent of {b}? Explain how you computed it.",
    "A bag has {a} red balls and {b} blue balls. What is the probability of drawing a red ball?",
    "Find the greatest common divisor of {a} and {b}, and explain the method.",
    "A savings account pays {a} percent interest per year on {b} dollars. How much interest is earned in {c} "
    "years, without compounding?",
    "The sum of two numbers is {a} and their difference is {b}. What are the numbers?",
    "Is {a} a prime number? Explain your reasoning.",
)

PASSAGE_TEMPLATES = (
    "Summarise the following text in three sentences:\n\n{passage}",
    "Rewrite the following text so that a beginner can understand it:\n\n{passage}",
    "Write three questions that the following text answers, and answer them:\n\n{passage}",
    "Extract the main terms defined in the following text as a bulleted list:\n\n{passage}",
    "Read the text below and explain its most important rule with an example:\n\n{passage}",
)


def word_problems(rng: random.Random, count: int) -> list[str]:
    """``count`` word problems: the patterns filled with seeded numbers."""
    problems = []
    for index in range(count):
        pattern = WORD_PROBLEMS[index % len(WORD_PROBLEMS)]
        a, b, c, d = (rng.randint(2, 60) for _ in range(4))
        problems.append(pattern.format(a=a, b=b, c=c, d=d))
    return problems


def documentation_passages(max_chars: int) -> list[str]:
    """Paragraph-aligned passages of the Python language reference's topics (pydoc_data), in a fixed order."""
    from pydoc_data.topics import topics

    passages = []
    for name in sorted(topics):
        text = topics[name].strip()
        paragraphs = [p.strip() for p in text.split("\n\n") if len(p.strip()) > 40]
        current = ""
        for paragraph in paragraphs:
            if current and len(current) + len(paragraph) > max_chars:
                passages.append(current)
                current = ""
            current = f"{current}\n\n{paragraph}" if current else paragraph[:max_chars]
        if len(current) > 120:
            passages.append(current)
    return passages
