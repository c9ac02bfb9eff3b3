import torch, sys
from transformers import AutoTokenizer
from client.mtbench import load_mtbench_first_turns
from stepahead_common.stdlib_prompts import code_prompts
from executor_svc.attention.selection import build_attention_backend
from executor_svc.model_loader import load_hf_config, load_model
from executor_svc.drafter_training.self_distill import SelfDistiller
from executor_svc.drafter_training.trainer import HeadTrainer, TrainSettings
from executor_svc.drafter_training.dataset import label_to_draft_map
from executor_svc.drafters.eagle_head import load_head
d = "/root/.cache/stepahead/models/SmolLM2-135M-Instruct"
cfg = load_hf_config(d); dev = torch.device("cpu")
model = load_model(d, torch.float32, dev, build_attention_backend("torch", dev))
tok = AutoTokenizer.from_pretrained(d)
prompts = [list(tok.apply_chat_template([{"role":"user","content":p}], add_generation_prompt=True, tokenize=True, return_dict=False)) for p in (code_prompts(8) if "code" in sys.argv else load_mtbench_first_turns(int(__import__('os').environ.get('NUM_PROMPTS', '8'))))]
dist = SelfDistiller(model, dev, [2], 128, 0.7, 4096)
seqs = dist.generate(prompts, [True]*len(prompts), torch.Generator().manual_seed(0))
drafter_dir = next((a for a in sys.argv[1:] if a != "code"), "executor_svc/drafters/shipped_drafters/SmolLM2-135M-Instruct")
head, _ = load_head(drafter_dir, cfg, None, torch.float32, dev)
tr = HeadTrainer(head, model, label_to_draft_map(head.draft_vocab, cfg.vocab_size), TrainSettings(), 0)
print(tr.held_out_acceptance(seqs).describe())
print([len(s.token_ids)-s.prompt_len for s in seqs])
