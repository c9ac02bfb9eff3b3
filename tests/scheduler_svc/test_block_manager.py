"""Tests for scheduler_svc.block_manager."""

import random

import pytest

from scheduler_svc.block_manager import KVBlockManager, NoFreeBlocksError


def snapshot(manager: KVBlockManager, request_ids: list[str]) -> tuple:
    """Everything observable about the manager for these requests."""
    return (
        manager.num_free_blocks,
        tuple(tuple(manager.block_ids(rid)) for rid in request_ids),
        tuple(manager.ref_count(b) for b in range(manager.num_total_blocks)),
    )


@pytest.mark.parametrize(
    "num_blocks, block_size, field", [(0, 16, "num_blocks"), (4, 0, "block_size"), (-1, 16, "num_blocks")]
)
def test_invalid_sizes_raise_value_error_naming_the_field(num_blocks, block_size, field):
    with pytest.raises(ValueError, match=field):
        KVBlockManager(num_blocks, block_size)


@pytest.mark.parametrize(
    "num_tokens, expected_blocks", [(0, 0), (1, 1), (15, 1), (16, 1), (17, 2), (32, 2), (33, 3)]
)
def test_allocate_covers_exactly_the_tokens(num_tokens, expected_blocks):
    manager = KVBlockManager(num_blocks=8, block_size=16)
    assert manager.blocks_needed("a", num_tokens) == expected_blocks
    new = manager.allocate("a", num_tokens)
    assert new == list(range(expected_blocks))
    assert manager.block_ids("a") == new
    assert manager.num_free_blocks == 8 - expected_blocks


def test_allocate_grows_the_table_and_returns_only_new_blocks():
    manager = KVBlockManager(num_blocks=8, block_size=4)
    assert manager.allocate("a", 3) == [0]
    assert manager.allocate("a", 4) == []
    assert manager.allocate("b", 1) == [1]
    assert manager.allocate("a", 9) == [2, 3]
    assert manager.block_ids("a") == [0, 2, 3]
    assert manager.blocks_needed("a", 5) == 0  # a shrinking request never needs blocks


def test_block_ids_returns_a_copy():
    manager = KVBlockManager(num_blocks=4, block_size=4)
    manager.allocate("a", 4)
    manager.block_ids("a").append(99)
    assert manager.block_ids("a") == [0]
    assert manager.block_ids("unknown") == []


def test_can_allocate_never_mutates():
    manager = KVBlockManager(num_blocks=4, block_size=4)
    manager.allocate("a", 5)
    before = snapshot(manager, ["a", "b"])
    assert manager.can_allocate("a", 16)
    assert not manager.can_allocate("a", 17)
    assert manager.can_allocate("b", 8)
    assert not manager.can_allocate("b", 9)
    assert snapshot(manager, ["a", "b"]) == before


def test_exhaustion_raises_and_changes_nothing():
    manager = KVBlockManager(num_blocks=3, block_size=2)
    manager.allocate("a", 4)
    before = snapshot(manager, ["a", "b"])
    with pytest.raises(NoFreeBlocksError):
        manager.allocate("b", 3)
    assert isinstance(NoFreeBlocksError(), RuntimeError)
    assert snapshot(manager, ["a", "b"]) == before
    assert manager.allocate("b", 2) == [2]


def test_free_returns_blocks_and_is_idempotent():
    manager = KVBlockManager(num_blocks=4, block_size=2)
    manager.allocate("a", 4)
    manager.allocate("b", 2)
    manager.free("a")
    assert manager.num_free_blocks == 3
    assert manager.block_ids("a") == []
    manager.free("a")
    manager.free("never-seen")
    assert manager.num_free_blocks == 3
    assert manager.block_ids("b") == [2]


def test_freed_blocks_are_reused_in_fifo_order():
    manager = KVBlockManager(num_blocks=4, block_size=1)
    manager.allocate("a", 2)  # 0, 1
    manager.allocate("b", 1)  # 2
    manager.free("a")
    assert manager.allocate("c", 3) == [3, 0, 1]


def test_shared_blocks_stay_until_both_are_freed():
    manager = KVBlockManager(num_blocks=4, block_size=2)
    manager.allocate("parent", 3)
    manager.share("parent", "child")
    assert manager.block_ids("child") == [0, 1]
    assert [manager.ref_count(b) for b in (0, 1)] == [2, 2]
    assert manager.num_free_blocks == 2
    manager.free("parent")
    assert manager.num_free_blocks == 2
    assert manager.block_ids("child") == [0, 1]
    manager.free("child")
    assert manager.num_free_blocks == 4
    assert [manager.ref_count(b) for b in range(4)] == [0, 0, 0, 0]


def test_share_replaces_the_destination_table_and_tables_then_grow_apart():
    manager = KVBlockManager(num_blocks=6, block_size=2)
    manager.allocate("parent", 2)  # [0]
    manager.allocate("child", 2)  # [1]
    manager.share("parent", "child")
    assert manager.block_ids("child") == [0]
    assert manager.ref_count(1) == 0
    assert manager.allocate("child", 3) == [2]
    assert manager.block_ids("parent") == [0]
    manager.share("child", "child")
    assert manager.ref_count(0) == 2


def check_invariants(manager: KVBlockManager, request_ids: set[str]) -> None:
    """Reference counts equal table memberships; every block is either free or used, never both."""
    tables = [manager.block_ids(rid) for rid in request_ids]
    counted = [0] * manager.num_total_blocks
    for table in tables:
        assert len(table) == len(set(table))
        for block_id in table:
            counted[block_id] += 1
    refs = [manager.ref_count(b) for b in range(manager.num_total_blocks)]
    assert refs == counted
    used = {b for b, count in enumerate(refs) if count > 0}
    free = set(manager._free)
    assert len(free) == manager.num_free_blocks, "free list holds a duplicate"
    assert not used & free
    assert used | free == set(range(manager.num_total_blocks))
    assert sum(refs) == sum(len(t) for t in tables)


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_keep_invariants(seed):
    rng = random.Random(seed)
    manager = KVBlockManager(num_blocks=rng.randint(1, 24), block_size=rng.choice([1, 2, 16]))
    known: set[str] = set()
    exhausted = 0
    for _ in range(400):
        rid = f"r{rng.randrange(8)}"
        op = rng.choice(["allocate", "allocate", "free", "share", "check"])
        if op == "allocate":
            num_tokens = rng.randrange(0, 40)
            expected_ok = manager.can_allocate(rid, num_tokens)
            try:
                manager.allocate(rid, num_tokens)
                known.add(rid)
                assert expected_ok
            except NoFreeBlocksError:
                exhausted += 1
                assert not expected_ok
        elif op == "free":
            manager.free(rid)
        elif op == "share":
            manager.share(f"r{rng.randrange(8)}", rid)
            known.add(rid)
        check_invariants(manager, known | {f"r{i}" for i in range(8)})
    for rid in list(known):
        manager.free(rid)
    assert manager.num_free_blocks == manager.num_total_blocks
    assert exhausted > 0, "the random sequence never hit exhaustion; the test would not cover it"


# ---- prefix caching --------------------------------------------------------------------------
H = [bytes([i]) * 32 for i in range(8)]


def cached_manager(num_blocks: int = 6) -> KVBlockManager:
    return KVBlockManager(num_blocks, block_size=4, enable_prefix_caching=True)


def test_registered_blocks_are_found_and_taken_back_with_their_references():
    manager = cached_manager()
    manager.allocate("a", 10)  # blocks 0, 1, 2
    manager.register("a", H[:2])
    assert manager.cached_prefix(H[:3]) == [0, 1] and manager.cached_prefix([H[2], H[1]]) == []
    manager.take_cached("b", [0, 1])
    manager.allocate("b", 9)
    assert manager.block_ids("b") == [0, 1, 3] and [manager.ref_count(b) for b in (0, 1, 2, 3)] == [2, 2, 1, 1]
    check_invariants(manager, {"a", "b"})


def test_a_freed_registered_block_keeps_its_content_until_handed_out_least_recently_freed_first():
    manager = cached_manager(num_blocks=4)
    manager.allocate("a", 8)  # 0, 1
    manager.register("a", H[:2])
    manager.free("a")
    assert manager.num_free_blocks == 4 and manager.cached_prefix(H[:2]) == [0, 1]
    manager.allocate("b", 8)  # the never-registered blocks 2, 3 go first
    assert manager.block_ids("b") == [2, 3] and manager.cached_prefix(H[:2]) == [0, 1]
    manager.allocate("b", 12)  # then a's last block (freed first): the prefix keeps its first block
    assert manager.block_ids("b") == [2, 3, 1] and manager.cached_prefix(H[:2]) == [0]
    assert manager.num_evicted_blocks == 1 and manager.num_cached_blocks == 1


def test_taking_a_free_cached_block_removes_it_from_the_free_list():
    manager = cached_manager(num_blocks=3)
    manager.allocate("a", 4)
    manager.register("a", H[:1])
    manager.free("a")
    assert manager.can_allocate_after_cached([0], 12) and not manager.can_allocate_after_cached([0], 13)
    manager.take_cached("b", [0])
    assert manager.num_free_blocks == 2 and manager.ref_count(0) == 1
    manager.allocate("b", 12)
    assert manager.block_ids("b") == [0, 1, 2] and manager.num_free_blocks == 0
    check_invariants(manager, {"b"})


def test_first_writer_keeps_a_hash_and_a_block_keeps_its_first_hash():
    manager = cached_manager()
    manager.allocate("a", 4)
    manager.allocate("b", 4)
    manager.register("a", H[:1])
    manager.register("b", H[:1])  # the same content computed twice: the first block stays the cached one
    manager.register("a", [H[5]])  # block 0 is registered already
    assert manager.cached_prefix(H[:1]) == [0] and manager.cached_prefix([H[5]]) == []


def test_register_from_start_skips_the_blocks_before_it():
    manager = cached_manager()
    manager.allocate("a", 12)
    manager.register("a", H[:3], start=1)
    assert manager.cached_prefix(H[:3]) == [] and manager.num_cached_blocks == 2


def test_reset_and_disabled_caching_find_nothing():
    manager = cached_manager()
    manager.allocate("a", 8)
    manager.register("a", H[:2])
    manager.reset_prefix_cache()
    assert manager.cached_prefix(H[:2]) == [] and manager.num_cached_blocks == 0
    off = KVBlockManager(4, 4)
    off.allocate("a", 8)
    off.register("a", H[:2])
    assert off.cached_prefix(H[:2]) == [] and off.num_cached_blocks == 0


def test_taking_cached_blocks_into_a_table_that_holds_blocks_is_refused():
    manager = cached_manager()
    manager.allocate("a", 4)
    with pytest.raises(ValueError, match="already holds blocks"):
        manager.take_cached("a", [1])


@pytest.mark.parametrize("seed", range(5))
def test_random_operations_with_prefix_caching_keep_invariants(seed):
    rng = random.Random(seed)
    manager = KVBlockManager(num_blocks=rng.randint(2, 16), block_size=2, enable_prefix_caching=True)
    for _ in range(400):
        rid = f"r{rng.randrange(6)}"
        op = rng.choice(["allocate", "free", "register", "take"])
        num_tokens = rng.randrange(0, 12)
        if op == "allocate" and manager.can_allocate(rid, num_tokens):
            manager.allocate(rid, num_tokens)
        elif op == "free":
            manager.free(rid)
        elif op == "register":
            manager.register(rid, H[: len(manager.block_ids(rid))])
        elif op == "take" and not manager.block_ids(rid):
            cached = manager.cached_prefix(H[: rng.randrange(0, 4)])
            if manager.can_allocate_after_cached(cached, 2 * len(cached)):
                manager.take_cached(rid, cached)
        check_invariants(manager, {f"r{i}" for i in range(6)})
        hashes = manager._block_of_hash
        assert all(manager._hash_of_block[block] == h for h, block in hashes.items())
    for i in range(6):
        manager.free(f"r{i}")
    assert manager.num_free_blocks == manager.num_total_blocks
