import grpc
import pytest

from ccmrs_provider import ProviderError, Violation
from ccmrs_provider.paginate import DEFAULT_PAGE_SIZE, page


def test_pages_cover_every_entry_once() -> None:
    entries = [f"10.{i // 256}.{i % 256}.0/24" for i in range(1234)]
    seen, token = [], ""
    while True:
        got, token = page(entries, lambda s: s, 100, token)
        assert len(got) <= 100
        seen.extend(got)
        if not token:
            break
    assert seen == sorted(entries)


def test_entries_removed_between_pages_do_not_shift_the_rest() -> None:
    entries = [f"k{i}" for i in range(10)]
    first, token = page(entries, lambda s: s, 4, "")
    assert first == ["k0", "k1", "k2", "k3"]
    fewer = [k for k in entries if k not in ("k1", "k5")]
    second, _ = page(fewer, lambda s: s, 4, token)
    assert second == ["k4", "k6", "k7", "k8"]


def test_zero_means_the_default_and_the_last_page_has_no_token() -> None:
    entries = [f"{i:05}" for i in range(DEFAULT_PAGE_SIZE + 1)]
    got, token = page(entries, lambda s: s, 0, "")
    assert len(got) == DEFAULT_PAGE_SIZE and token
    got, token = page(entries, lambda s: s, 0, token)
    assert got == [entries[-1]] and token == ""


def test_tokens_are_the_rust_sdks() -> None:
    _, token = page(["a", "b"], lambda s: s, 1, "")
    assert token == "k1.61"


@pytest.mark.parametrize(
    ("size", "token", "field"),
    [(1, "garbage", "page_token"), (1, "k1.zz", "page_token"), (-1, "", "page_size")],
)
def test_bad_tokens_and_sizes_are_named(size: int, token: str, field: str) -> None:
    with pytest.raises(Violation) as e:
        page(["a"], lambda s: s, size, token)
    assert e.value.field == field


def test_a_key_listed_twice_is_a_provider_bug() -> None:
    for size, token in [(1, ""), (10, ""), (1, "k1.61")]:
        with pytest.raises(ProviderError) as e:
            page(["b", "a", "c", "b"], lambda s: s, size, token, what="a route for")
        assert (e.value.code, e.value.reason) == (grpc.StatusCode.INTERNAL, None)
        assert e.value.message == "provider listed a route for 'b' more than once"
