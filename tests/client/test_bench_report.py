"""The bench plot summarises several rounds of a configuration instead of drawing them over each other."""

from client.bench.report import RoundSpread, _median_bare_forwards, spread_per_label, write_plot


def _run(label: str, round_index: int, tok_s: float, bubble: float = 0.05) -> dict:
    return {"label": label, "round": round_index, "throughput_tok_s": tok_s, "itl_ms_p50": 5.0,
            "itl_ms_p99": 9.0, "bubble_fraction": bubble}


def test_spread_per_label_is_the_median_and_extremes_in_first_seen_order():
    runs = [_run("sync", 0, 100), _run("async", 0, 150), _run("sync", 1, 300), _run("async", 1, 130),
            _run("sync", 2, 200), _run("async", 2, 140)]
    assert spread_per_label(runs, "throughput_tok_s") == [
        RoundSpread("sync", 200, 100, 300), RoundSpread("async", 140, 130, 150)]


def test_spread_per_label_scales_fractions_to_percent():
    runs = [_run("async", 0, 1, bubble=0.04), _run("async", 1, 1, bubble=0.05)]
    [spread] = spread_per_label(runs, "bubble_fraction", 100.0)
    assert (spread.median, spread.low, spread.high) == (4.5, 4.0, 5.0)


def test_bare_forward_lines_are_one_per_batch_size():
    report = {"bare_forward": [{"batch_size": 16, "median_ms": 4.0}, {"batch_size": 1, "median_ms": 1.0},
                               {"batch_size": 16, "median_ms": 6.0}, {"batch_size": 16, "median_ms": 5.0},
                               {"batch_size": 16, "query_len": 4, "median_ms": 9.0}]}
    assert _median_bare_forwards(report) == {1: 1.0, 16: 5.0}


def test_write_plot_of_several_rounds_writes_a_png(tmp_path):
    report = {"title": "t", "runs": [_run("sync", 0, 100), _run("async", 0, 150), _run("sync", 1, 110),
                                     _run("async", 1, 140)],
              "bare_forward": [{"batch_size": 16, "median_ms": 4.0}], "hf": []}
    path = tmp_path / "plot.png"
    write_plot(report, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
