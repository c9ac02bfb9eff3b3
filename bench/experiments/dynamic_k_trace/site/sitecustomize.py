import os
if os.environ.get("KTRACE"):
    try:
        from scheduler_svc import dynamic_k
        _choose, _observe = dynamic_k.DynamicKPolicy.choose, dynamic_k.DynamicKPolicy.observe
        _log = open(f"{os.environ['KTRACE']}.{os.getpid()}", "a", buffering=1)
        def choose(self, batch_size):
            k = _choose(self, batch_size)
            _log.write(f"C {batch_size} {k} {' '.join('%.3f' % r for r in self.acceptance.rates)}\n")
            return k
        def observe(self, d, a):
            _log.write(f"O {d} {a}\n")
            return _observe(self, d, a)
        dynamic_k.DynamicKPolicy.choose = choose
        dynamic_k.DynamicKPolicy.observe = observe
    except Exception as e:
        print("trace site failed", e)
if os.environ.get("DTRACE"):  # per eagle_ngram proposal: lookup/head drafts, head catch-up rows, head time
    try:
        import time as _time
        from executor_svc.drafters import eagle as _eagle, eagle_ngram as _en
        _dlog = open(f"{os.environ['DTRACE']}.{os.getpid()}", "a", buffering=1)
        _catch = _eagle.EagleDrafter._catch_up
        def _catch_up(self, batch):
            _dlog.write(f"U {sum(len(slots) for _, slots in batch)}\n")
            return _catch(self, batch)
        _eagle.EagleDrafter._catch_up = _catch_up
        def _propose(self, batch):
            proposals = self.ngram.propose(batch)
            unmatched = [i for i, d in enumerate(proposals) if not d]
            began = _time.perf_counter()
            for index, drafts in zip(unmatched, self.eagle.propose([batch[i] for i in unmatched])):
                proposals[index] = drafts
            _dlog.write(f"P lookup {len(batch) - len(unmatched)} head {len(unmatched)} "
                        f"head_ms {(_time.perf_counter() - began) * 1e3:.2f} "
                        f"drafts {' '.join(str(len(p)) for p in proposals)}\n")
            return proposals
        _en.EagleNgramDrafter.propose = _propose
    except Exception as e:
        print("draft trace site failed", e)
