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
