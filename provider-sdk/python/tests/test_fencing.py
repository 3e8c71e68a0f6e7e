import pytest

from ccmrs_provider import Fence, FencingToken, ProviderError, Reason


def test_round_trips_and_rejects_malformed_values() -> None:
    t = FencingToken(7, "cp-1_0a1b:extra")
    assert str(t) == "7:cp-1_0a1b:extra"
    assert FencingToken.parse(str(t)) == t
    for bad in ["", "7", "x:me", "-1:me", "7:", "1.5:me", f"1:{'h' * 254}", "٣:me"]:
        with pytest.raises(ValueError):
            FencingToken.parse(bad)


def test_older_terms_and_same_term_strangers_are_superseded() -> None:
    newest = FencingToken(5, "b")
    assert FencingToken(4, "b").is_superseded_by(newest)
    assert FencingToken(4, "a").is_superseded_by(newest)
    assert FencingToken(5, "a").is_superseded_by(newest)
    assert not FencingToken(5, "b").is_superseded_by(newest)
    assert not FencingToken(6, "a").is_superseded_by(newest)


def test_the_high_water_mark_only_rises() -> None:
    a = FencingToken(3, "a")
    assert FencingToken.newest(None, a) == a
    assert FencingToken.newest(a, FencingToken(2, "b")) == a
    assert FencingToken.newest(a, FencingToken(3, "c")) == a, "same term: the first holder stays"
    d = FencingToken(4, "d")
    assert FencingToken.newest(a, d) == d


def test_fence_refuses_deposed_leaders_per_cluster() -> None:
    fence = Fence()
    fence.admit("c1", None)  # leader election off: never fenced
    fence.admit("c1", FencingToken(2, "new"))
    with pytest.raises(ProviderError) as refused:
        fence.admit("c1", FencingToken(1, "old"))
    assert refused.value.reason == Reason.NOT_LEADER
    assert refused.value.newest_leader == FencingToken(2, "new")
    fence.admit("c2", FencingToken(1, "old"))  # another cluster has its own mark
    fence.admit("c1", FencingToken(3, "newer"))
    assert fence.newest("c1") == FencingToken(3, "newer")
