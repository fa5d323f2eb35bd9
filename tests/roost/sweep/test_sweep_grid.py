"""A sweep's grid: every combination of the axes, as vLLM overrides; malformed axes refused by name."""

from __future__ import annotations

import pytest

from roost.errors import UserError
from roost.sweep.grid import MAX_VARIANTS, parse_grid, variants


def test_every_combination_first_axis_slowest() -> None:
    vs = variants(parse_grid(["max-num-seqs=16,20,24", "--max-num-batched-tokens=4096,8192"]))
    assert [v.name for v in vs] == [
        "max-num-seqs=16 max-num-batched-tokens=4096", "max-num-seqs=16 max-num-batched-tokens=8192",
        "max-num-seqs=20 max-num-batched-tokens=4096", "max-num-seqs=20 max-num-batched-tokens=8192",
        "max-num-seqs=24 max-num-batched-tokens=4096", "max-num-seqs=24 max-num-batched-tokens=8192"]
    assert vs[3].overrides == ["--max-num-seqs=20", "--max-num-batched-tokens=8192"]


def test_on_and_off_make_a_switch_given_or_left_out() -> None:
    on, off = variants(parse_grid(["enforce-eager=on,off"]))
    assert (on.overrides, off.overrides) == (["--enforce-eager"], [])
    mtp, plain = variants(parse_grid(['speculative-config={"method":"mtp","num_speculative_tokens":1},off']))
    assert mtp.overrides == ['--speculative-config={"method":"mtp","num_speculative_tokens":1}']
    assert plain.overrides == [] and plain.name == "speculative-config=off"


@pytest.mark.parametrize("specs, says", [
    ([], "at least one --grid"),
    (["max-num-seqs"], "write FLAG=V1,V2"),
    (["=1,2"], "write FLAG=V1,V2"),
    (["Max_Num=1"], "not a vLLM flag name"),
    (["api-key=a,b"], "carries a secret"),
    (["max-num-seqs=1,,2"], "an empty value"),
    (["max-num-seqs=1;rm -rf"], "characters a vLLM flag value cannot have"),
    (["max-num-seqs=8,8"], "listed twice"),
    (["max-num-seqs=1", "max-num-seqs=2"], "given twice"),
    ([f"a={','.join(map(str, range(9)))}", f"b={','.join(map(str, range(9)))}"], f"at most {MAX_VARIANTS}"),
])
def test_a_malformed_grid_is_refused_by_name(specs: list[str], says: str) -> None:
    with pytest.raises(UserError, match="grid") as info:
        parse_grid(specs)
    assert says in str(info.value)
