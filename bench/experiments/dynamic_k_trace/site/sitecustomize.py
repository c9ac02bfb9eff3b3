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
if os.environ.get("DTRACE"):  # per eagle_ngram proposal: requests asked, head-drafted ones and head time; catch-up rows
    try:
        import time as _time
        from executor_svc.drafters import eagle as _eagle, eagle_ngram as _en
        _dlog = open(f"{os.environ['DTRACE']}.{os.getpid()}", "a", buffering=1)
        _catch, _head_propose, _propose = (_eagle.EagleDrafter._catch_up, _eagle.EagleDrafter.propose,
                                           _en.EagleNgramDrafter.propose)
        def _catch_up(self, batch):
            _dlog.write(f"U {sum(len(slots) for _, slots in batch)}\n")
            return _catch(self, batch)
        def head_propose(self, batch):  # called by eagle_ngram with the requests the lookup found no match for
            began = _time.perf_counter()
            proposals = _head_propose(self, batch)
            _dlog.write(f"H {len(batch)} {(_time.perf_counter() - began) * 1e3:.2f}\n")
            return proposals
        def propose(self, batch):
            _dlog.write(f"P {len(batch)}\n")
            return _propose(self, batch)
        _eagle.EagleDrafter._catch_up = _catch_up
        _eagle.EagleDrafter.propose = head_propose
        _en.EagleNgramDrafter.propose = propose
    except Exception as e:
        print("draft trace site failed", e)
