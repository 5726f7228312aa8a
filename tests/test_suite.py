"""Suite files say what they run: hyperparameters vary in [matrix], a typo anywhere is an error with a did-you-mean,
an override or reference that matches no cell is an error, and every shipped suite keeps its cells."""
import hashlib
import json
import pathlib
import re

import pytest

from benchmark.campaign import suite
from benchmark.campaign.suite import SuiteError, load_suite

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEFORE = json.loads((ROOT / "tests" / "data" / "suite_cells_9a676fb.json").read_text())

HEAD = """
name = "{name}"
description = "test suite"
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 5
rounds = 2
"""


def write(tmp_path, body, name="t"):
    p = tmp_path / f"{name}.toml"
    p.write_text(HEAD.format(name=name) + body)
    return p


def error(tmp_path, body) -> str:
    with pytest.raises(SuiteError) as e:
        load_suite(write(tmp_path, body))
    assert "t.toml" in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_every_shipped_suite_keeps_its_cells_and_references(name):
    """The cells (config hashes, in order) and their references, as loaded by the code before benchmark.campaign.suite
    (9a676fb): stricter checking changed no committed cell."""
    s = load_suite(name)
    assert len(s.cells) == BEFORE[name]["cells"]
    assert hashlib.sha256("\n".join(c.config_hash for c in s.cells).encode()).hexdigest() == \
        BEFORE[name]["hashes_sha256"]
    refs = json.dumps([[x.value for x in c.references] for c in s.cells])
    assert hashlib.sha256(refs.encode()).hexdigest() == BEFORE[name]["references_sha256"]
    assert set(BEFORE) == set(suite.suite_names())


def test_matrix_varies_hyperparameters_as_a_list_of_tables(tmp_path):
    s = load_suite(write(tmp_path, """
[matrix]
algorithm = ["fedavgm"]
algorithm_args = [{ beta1 = 0.1 }, { beta1 = 0.5, eta_g = 2.0 }]
seed = [0, 1]
"""))
    got = sorted((c.experiment.algorithm_args["beta1"], c.experiment.algorithm_args.get("eta_g"), c.experiment.seed)
                 for c in s.cells)
    assert got == [(0.1, None, 0), (0.1, None, 1), (0.5, 2.0, 0), (0.5, 2.0, 1)]


def test_matrix_blocks_give_each_method_its_own_grid(tmp_path):
    """The gradma_table1 notes' advice: a [[matrix]] block per method, the union of their cells."""
    s = load_suite(write(tmp_path, """
[[matrix]]
algorithm = ["fedavg"]
seed = [0]
[[matrix]]
algorithm = ["fedprox"]
algorithm_args = [{ mu = 0.001 }, { mu = 0.1 }]
seed = [0]
"""))
    assert sorted((c.experiment.algorithm, json.dumps(c.experiment.algorithm_args)) for c in s.cells) == [
        ("fedavg", "{}"), ("fedprox", '{"mu": 0.001}'), ("fedprox", '{"mu": 0.1}')]


def test_a_table_of_lists_is_refused_with_the_spelling_that_works(tmp_path):
    msg = error(tmp_path, "[matrix]\nalgorithm = ['fedavgm']\nalgorithm_args = { beta1 = [0.1, 0.5] }\n")
    assert "list of tables" in msg and "algorithm_args = [{ beta1 = 0.1 }, { beta1 = 0.5 }]" in msg


def test_an_override_that_matches_no_cell_is_an_error(tmp_path):
    msg = error(tmp_path, """
[matrix]
algorithm = ["fedavg", "fedprox"]
[[override]]
match = { algorithm = "fedproxx" }
set = { algorithm_args = { mu = 0.1 } }
""")
    assert "[[override]] #1" in msg and "matches no cell" in msg and "Did you mean '\"fedprox\"'" in msg


def test_an_override_on_a_dict_key_that_matches_no_cell_is_an_error(tmp_path):
    msg = error(tmp_path, """
[matrix]
algorithm = ["fedprox"]
algorithm_args = [{ mu = 0.1 }]
[[override]]
match = { algorithm_args = { mu = 0.01 } }
set = { lr = 0.5 }
""")
    assert "no cell has algorithm_args.mu = 0.01" in msg


def test_a_reference_that_matches_no_cell_is_an_error(tmp_path):
    msg = error(tmp_path, """
[matrix]
algorithm = ["fedavg"]
partition = ["iid"]
[[reference]]
match = { algorithm = "fedavg", partition = "iidd" }
value = 90.0
""")
    assert "[[reference]] #1" in msg and "iidd" in msg


@pytest.mark.parametrize("body, fragment", [
    ("[matrix]\nrouds = [2]\n", "Did you mean 'rounds'"),
    ("[matrix]\nseed = [0]\n[[override]]\nmatch = {}\nsett = { lr = 0.5 }\n", "Did you mean 'set'"),
    ("[matrix]\nseed = [0]\n[[reference]]\nmatch = {}\nvalu = 1.0\n", "Did you mean 'value'"),
    ("[matrix]\nalgorithm = ['fedprox']\nalgorithm_args = [{ muu = 0.1 }]\n", "Did you mean 'mu'"),
    ("[matrix]\nseed = [0]\n[[override]]\nmatch = {}\nset = { dataset_args = { normalise = false } }\n",
     "Did you mean 'normalize'"),
    ("[matrix]\nmodel = ['mlp']\nmodel_args = [{ hiden = 8 }]\n", "Did you mean 'hidden'"),
    ("[matrix]\nmodel = ['logrg']\n", "Did you mean 'logreg'"),
    ("[matrix]\ndataset = ['digts']\n", "Did you mean 'digits'"),
])
def test_unknown_keys_anywhere_are_errors_with_a_did_you_mean(tmp_path, body, fragment):
    assert fragment in error(tmp_path, body)


def test_an_unknown_top_level_key_is_an_error(tmp_path):
    p = tmp_path / "t.toml"
    p.write_text('name = "t"\ndescripton = "x"\n[matrix]\nseed = [0]\n')
    with pytest.raises(SuiteError, match="unknown top-level key 'descripton'. Did you mean 'description'"):
        load_suite(p)


def test_a_value_listed_twice_is_refused(tmp_path):
    assert "seed lists 0 more than once" in error(tmp_path, "[matrix]\nseed = [0, 0]\n")


def test_a_suite_is_found_by_path_and_a_missing_path_is_named(tmp_path):
    p = write(tmp_path, "[matrix]\nseed = [0]\n", name="mine")
    assert load_suite(str(p)).name == "mine"
    with pytest.raises(SuiteError, match="no suite file"):
        load_suite(str(tmp_path / "nope.toml"))
    with pytest.raises(SuiteError, match="Did you mean 'smoke'"):
        load_suite("smokey")


def test_only_that_matches_nothing_says_which_value(tmp_path):
    s = load_suite("smoke")
    with pytest.raises(SuiteError, match="no cell has dataset = 'mnist'"):
        suite.select_cells(s, ["dataset=mnist"])
    assert len(suite.select_cells(s, ["partition=iid"]).cells) == 9


def test_the_tuning_advice_of_gradma_table1_works(tmp_path):
    text = (suite.SUITES_DIR / "gradma_table1.toml").read_text()
    assert "write\nits [matrix] as [[matrix]]" in text
    text = text.replace('name = "gradma_table1"', 'name = "tune_gradma"').replace("\n[matrix]\n", "\n[[matrix]]\n")
    text += """
[[matrix]]
algorithm = ["gradma"]
algorithm_args = [{ beta1 = 0.1, beta2 = 0.5 }, { beta1 = 0.9, beta2 = 0.5 }]
lr = [0.001, 0.1]
dataset = ["mnist"]
partition = ["dirichlet:1.0"]
clients_per_round = [10]
seed = [0]
"""
    p = tmp_path / "tune_gradma.toml"
    p.write_text(text)
    s = load_suite(p)
    base = {c.config_hash for c in load_suite("gradma_table1").cells}
    extra = [c for c in s.cells if c.config_hash not in base]
    assert base <= {c.config_hash for c in s.cells} and len(extra) == 4
    assert {(c.experiment.algorithm_args["beta1"], c.experiment.lr, c.experiment.model, c.experiment.rounds)
            for c in extra} == {(b, lr, "gradma_mlp", 500) for b in (0.1, 0.9) for lr in (0.001, 0.1)}


def test_the_matrix_blocks_example_of_format_md_loads(tmp_path):
    text = (suite.SUITES_DIR / "FORMAT.md").read_text()
    block = next(b for b in (x.split("```")[0] for x in text.split("```toml")[1:]) if "[[matrix]]" in b)
    s = load_suite(write(tmp_path, block))
    assert len(s.cells) == 2 * 2 * 3 + 2 * 2 * 2 * 3


# ----------------------------------------------------------------------------------------------- divergence rule

def _rule_suite(tmp_path, top: str = "", defaults: str = "", extra: str = "", name: str = "rule"):
    p = tmp_path / f"{name}.toml"
    p.write_text(f'name = "{name}"\n{top}\n[defaults]\ndataset = "digits"\nmodel = "logreg"\nnum_clients = 5\n'
                 f'rounds = 2\n{defaults}\n[matrix]\nalgorithm = ["fedavg"]\nseed = [0, 1]\n{extra}')
    return load_suite(p)


def test_the_divergence_rule_is_set_or_switched_off_per_suite(tmp_path):
    plain = _rule_suite(tmp_path)
    default = _rule_suite(tmp_path, "divergence_factor = 100")
    off = _rule_suite(tmp_path, "divergence_factor = false")
    lax = _rule_suite(tmp_path, "divergence_factor = 1000")
    assert [c.config_hash for c in default.cells] == [c.config_hash for c in plain.cells]  # the default: hash-neutral
    assert {c.experiment.divergence_factor for c in off.cells} == {None}
    assert {c.experiment.config()["divergence_factor"] for c in lax.cells} == {1000}  # recorded in the config
    hashes = [{c.config_hash for c in s.cells} for s in (plain, off, lax)]
    assert not (hashes[0] & hashes[1]) and not (hashes[0] & hashes[2]) and not (hashes[1] & hashes[2])
    in_defaults = _rule_suite(tmp_path, defaults="divergence_factor = false")
    assert [c.config_hash for c in in_defaults.cells] == [c.config_hash for c in off.cells]
    per_cell = _rule_suite(tmp_path, extra='[[override]]\nmatch = { seed = 1 }\nset = { divergence_factor = false }\n')
    assert [c.experiment.divergence_factor for c in per_cell.cells] == [100, None]


@pytest.mark.parametrize("top, defaults, says", [
    ("divergence_factor = true", "", "names no factor"),
    ("divergence_factor = 0.5", "", "divergence_factor must be a number > 1"),
    ("divergence_factor = 100", "divergence_factor = 10", "both at the top level and in [defaults]"),
    ("divergence_factr = 100", "", "Did you mean 'divergence_factor'"),
])
def test_a_bad_divergence_rule_is_refused(tmp_path, top, defaults, says):
    with pytest.raises(SuiteError, match=re.escape(says)) as e:
        _rule_suite(tmp_path, top, defaults)
    assert "rule.toml" in str(e.value)
