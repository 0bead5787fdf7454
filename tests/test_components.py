"""Component trees: an algorithm holding a learner holding one module or a dict of modules,
saved as folders of one archive, loaded or restored part by part; inference loading."""

from __future__ import annotations

import json
import re
import zipfile

import pytest
import torch

import zipsave


class Module(zipsave.Saveable):
    """A deployable policy (an RLlib RLModule): network plus its optimizer."""

    def __init__(self, obs_dim=4, act_dim=2, hidden=8, seed=0):
        torch.manual_seed(seed)
        self.obs_dim = obs_dim
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(obs_dim, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, act_dim)
        )
        self.policy.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
        self.version = 0

    def act(self, obs):
        with torch.no_grad():
            return self.policy(obs)

    def update(self, gen):
        obs = torch.randn(16, self.obs_dim, generator=gen)
        loss = self.policy(obs).pow(2).mean()
        self.policy.optimizer.zero_grad()
        loss.backward()
        self.policy.optimizer.step()
        self.version += 1


class Learner(zipsave.Saveable):
    def __init__(self, agents=None, seed=0):
        if agents is None:
            self.module = Module(seed=seed)
        else:
            self.module = {name: Module(seed=seed + i) for i, name in enumerate(agents)}
        self.value_head = torch.nn.Linear(4, 1)
        self.updates = 0

    def modules(self):
        return self.module.values() if isinstance(self.module, dict) else [self.module]


class Algo(zipsave.Saveable):
    def __init__(self, agents=None, gamma=0.99, seed=0):
        self.learner = Learner(agents=agents, seed=seed)
        self.gamma = gamma
        self.iteration = 0
        self.log_alpha = torch.zeros(1, requires_grad=True)

    def train(self, steps=2, seed=0):
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            for module in self.learner.modules():
                module.update(gen)
            self.learner.updates += 1
            self.iteration += 1
            with torch.no_grad():
                self.log_alpha += 0.1
        return self


class Team(zipsave.Saveable):
    """Its constructor does not create the dict of components it later holds."""

    def __init__(self, size=2):
        self.size = size


def tensors(obj) -> dict[str, torch.Tensor]:
    """Every tensor of a component tree, by path, copied."""
    out = {}
    for name, value in vars(obj).items():
        if isinstance(value, zipsave.Saveable):
            out.update({f"{name}/{k}": v for k, v in tensors(value).items()})
        elif isinstance(value, dict) and value and all(isinstance(v, zipsave.Saveable) for v in value.values()):
            for key, comp in value.items():
                out.update({f"{name}/{key}/{k}": v for k, v in tensors(comp).items()})
        elif isinstance(value, torch.nn.Module):
            out.update({f"{name}.{k}": v.detach().clone() for k, v in value.state_dict().items()})
            opt = getattr(value, "optimizer", None)
            if opt is not None:
                for index, state in opt.state_dict()["state"].items():
                    out.update({f"{name}.optimizer.{index}.{k}": v.clone() for k, v in state.items()})
        elif isinstance(value, torch.Tensor):
            out[name] = value.detach().clone()
    return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def only(d: dict, prefix: str) -> dict:
    return {k: v for k, v in d.items() if k.startswith(prefix)}


def without(d: dict, prefix: str) -> dict:
    return {k: v for k, v in d.items() if not k.startswith(prefix)}


@pytest.fixture
def multi(tmp_path):
    algo = Algo(agents=["p0", "p1"]).train(3)
    path = tmp_path / "algo.zip"
    zipsave.save(algo, path)
    return algo, path


def test_components_are_folders_a_zip_explorer_shows(multi):
    _, path = multi
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        root = zipfile.Path(zf)
        assert sorted(p.name for p in root.joinpath("learner/module").iterdir()) == ["p0", "p1"]
        assert sorted(p.name for p in root.joinpath("learner/module/p1").iterdir()) == [
            "data",
            "init.json",
            "policy.optimizer.pth",
            "policy.pth",
            "pytorch_variables.pth",
        ]
    for folder in ("", "learner/", "learner/module/p0/", "learner/module/p1/"):
        assert {folder + "data", folder + "init.json", folder + "pytorch_variables.pth"} <= names
    assert "learner/value_head.pth" in names
    assert "learner/module/data" not in names  # a dict of components is a plain folder


def test_whole_tree_round_trip(multi):
    algo, path = multi
    loaded = zipsave.load(path)
    assert type(loaded) is Algo and type(loaded.learner) is Learner
    assert sorted(loaded.learner.module) == ["p0", "p1"]
    assert all(type(m) is Module for m in loaded.learner.module.values())
    assert same(tensors(loaded), tensors(algo))
    assert (loaded.iteration, loaded.learner.updates, loaded.learner.module["p1"].version) == (3, 3, 3)
    loaded.train(2, seed=7)  # optimizers were restored too: training continues identically
    assert same(tensors(loaded), tensors(algo.train(2, seed=7)))


def test_load_one_component_alone(multi):
    algo, path = multi
    module = zipsave.load(path, component="learner/module/p1")
    assert type(module) is Module and module.version == 3
    assert same(tensors(module), tensors(algo.learner.module["p1"]))
    obs = torch.randn(5, 4)
    assert torch.equal(module.act(obs), algo.learner.module["p1"].act(obs))

    learner = zipsave.load(path, component="/learner/")
    assert type(learner) is Learner and same(tensors(learner), tensors(algo.learner))


def test_load_a_dict_of_components(multi):
    algo, path = multi
    modules = zipsave.load(path, component="learner/module")
    assert isinstance(modules, dict) and sorted(modules) == ["p0", "p1"]
    for key in ("p0", "p1"):
        assert same(tensors(modules[key]), tensors(algo.learner.module[key]))


def test_single_module_component(tmp_path):
    algo = Algo().train(2)
    zipsave.save(algo, tmp_path / "a.zip")
    module = zipsave.load(tmp_path / "a.zip", component="learner/module")
    assert type(module) is Module and same(tensors(module), tensors(algo.learner.module))


def test_restore_one_component_leaves_everything_else_untouched(multi):
    algo, path = multi
    saved = tensors(algo)
    algo.train(2, seed=1)  # training goes on; every tensor moves
    moved = tensors(algo)
    pointers = {k: v.data_ptr() for k, v in algo.learner.module["p1"].policy.state_dict().items()}

    zipsave.restore(algo, path, component="learner/module/p1")

    now = tensors(algo)
    assert same(only(now, "learner/module/p1/"), only(saved, "learner/module/p1/"))
    assert same(without(now, "learner/module/p1/"), without(moved, "learner/module/p1/"))
    assert not same(without(now, "learner/module/p1/"), without(saved, "learner/module/p1/"))
    assert algo.learner.module["p1"].version == 3 and algo.learner.module["p0"].version == 5
    assert algo.iteration == 5 and algo.learner.updates == 5
    # read straight into the live parameters, no new tensors
    assert {k: v.data_ptr() for k, v in algo.learner.module["p1"].policy.state_dict().items()} == pointers


def test_restore_a_dict_of_components_in_place(multi):
    algo, path = multi
    saved = tensors(algo)
    algo.train(1, seed=2)
    moved = tensors(algo)
    zipsave.restore(algo, path, component="learner/module")
    now = tensors(algo)
    assert same(only(now, "learner/module/"), only(saved, "learner/module/"))
    assert same(without(now, "learner/module/"), without(moved, "learner/module/"))


def test_self_play_swap_from_another_archive(tmp_path):
    """Restore an opponent's old policy from another checkpoint into a different slot."""
    league = Algo(agents=["p0", "p1"], seed=100).train(4, seed=3)
    zipsave.save(league, tmp_path / "league.zip")
    algo = Algo(agents=["p0", "p1"]).train(1)
    before = tensors(algo)

    # 1. restore into the object you pass: it has no `learner`, so the component goes into it
    zipsave.restore(algo.learner.module["p0"], tmp_path / "league.zip", component="learner/module/p1")
    now = tensors(algo)
    assert same(tensors(algo.learner.module["p0"]), tensors(league.learner.module["p1"]))
    assert same(without(now, "learner/module/p0/"), without(before, "learner/module/p0/"))

    # 2. the same, addressed from the root with `into=`
    algo = Algo(agents=["p0", "p1"]).train(1)
    zipsave.restore(algo, tmp_path / "league.zip", component="learner/module/p1", into="learner/module/p0")
    assert same(tensors(algo.learner.module["p0"]), tensors(league.learner.module["p1"]))
    assert same(tensors(algo.learner.module["p1"]), only_module(before, "p1"))

    # 3. `into=""` is the object passed, whatever it holds
    algo = Algo(agents=["p0", "p1"]).train(1)
    module = algo.learner.module["p1"]
    zipsave.restore(module, tmp_path / "league.zip", component="learner/module/p0", into="")
    assert same(tensors(module), tensors(league.learner.module["p0"]))


def only_module(flat: dict, key: str) -> dict:
    prefix = f"learner/module/{key}/"
    return {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}


def test_restore_errors_name_the_component(multi):
    algo, path = multi
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("has no component `learner/module/p7`")):
        zipsave.restore(algo, path, component="learner/module/p7")
    with pytest.raises(zipsave.ArchiveFormatError, match=re.escape("components: ['learner', 'learner/module/p0'")):
        zipsave.load(path, component="critic")
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("learner/module (dict) has no `p9`")):
        zipsave.restore(algo, path, component="learner/module/p1", into="learner/module/p9")
    smaller = Algo(agents=["p0"])
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape('Pass `into="attribute/path"`')):
        zipsave.restore(smaller, path, component="learner/module/p1")


def test_component_keys_must_be_folder_names(tmp_path):
    algo = Algo(agents=["p0"])
    algo.learner.module = {0: Module()}
    with pytest.raises(zipsave.EncodeError, match=re.escape("the dict of components `module` has the key 0")):
        zipsave.save(algo, tmp_path / "a.zip")
    algo.learner.module = {"a/b": Module()}
    with pytest.raises(zipsave.EncodeError, match=re.escape("has the key 'a/b'")):
        zipsave.save(algo, tmp_path / "a.zip")
    assert not (tmp_path / "a.zip").exists()


def test_components_the_constructor_does_not_create_are_built(tmp_path):
    team = Team()
    team.members = {"a": Module(seed=1), "b": Module(seed=2)}
    zipsave.save(team, tmp_path / "team.zip")
    loaded = zipsave.load(tmp_path / "team.zip")
    assert sorted(loaded.members) == ["a", "b"]
    assert same(tensors(loaded.members["b"]), tensors(team.members["b"]))


# -- inference loading -------------------------------------------------------------------------
def optimizer_states(algo):
    return [m.policy.optimizer.state_dict()["state"] for m in algo.learner.modules()]


@pytest.mark.parametrize("how", ["zipsave.load", "Algo.load"])
def test_load_without_optimizer_state(multi, how):
    algo, path = multi
    load = zipsave.load if how == "zipsave.load" else Algo.load
    loaded = load(path, exclude=["*.optimizer"])
    assert all(state == {} for state in optimizer_states(loaded))  # fresh optimizers
    assert all(state for state in optimizer_states(algo))
    assert same(
        {k: v for k, v in tensors(loaded).items() if ".optimizer." not in k},
        {k: v for k, v in tensors(algo).items() if ".optimizer." not in k},
    )
    assert loaded.zipsave_report.ok


def test_load_component_without_optimizer_state(multi):
    algo, path = multi
    module = zipsave.load(path, component="learner/module/p0", exclude=["*.optimizer"])
    assert module.policy.optimizer.state_dict()["state"] == {}
    assert same(
        tensors(module), {k: v for k, v in tensors(algo.learner.module["p0"]).items() if ".optimizer." not in k}
    )


def test_restore_without_optimizer_state_keeps_the_running_one(multi):
    algo, path = multi
    algo.train(1, seed=5)
    running = [{i: {k: v.clone() for k, v in s.items()} for i, s in state.items()} for state in optimizer_states(algo)]
    zipsave.restore(algo, path, exclude=["*.optimizer"])
    for before, after in zip(running, optimizer_states(algo)):
        assert all(torch.equal(before[i][k], after[i][k]) for i in before for k in before[i])


def test_exclude_does_not_hide_a_real_mismatch(tmp_path):
    algo = Algo()
    zipsave.save(algo, tmp_path / "a.zip")
    algo.learner.module.extra = torch.nn.Linear(2, 2)
    with pytest.raises(zipsave.ParameterMismatchError, match=re.escape("but the object has ['extra', 'policy']")):
        zipsave.restore(algo, tmp_path / "a.zip", exclude=["*.optimizer"])


class _Inner(zipsave.Saveable):
    def __init__(self, width=3):
        self.net = torch.nn.Linear(width, width)


class _Outer(zipsave.Saveable):
    def __init__(self, inner, scale=1.0):
        self.inner = inner
        self.scale = scale


def test_component_passed_to_the_constructor(tmp_path):
    outer = _Outer(_Inner(width=4), scale=2.0)
    with torch.no_grad():
        outer.inner.net.weight.fill_(0.25)
    outer.save(tmp_path / "o.zip")
    with zipfile.ZipFile(tmp_path / "o.zip") as zf:
        init = json.loads(zf.read("init.json"))
        names = zf.namelist()
    assert init["args"]["inner"][":zipsave:"] == {"kind": "component", "path": "inner"}
    assert "inner/net.pth" in names and "inner/init.json" in names
    loaded = zipsave.load(tmp_path / "o.zip")
    assert isinstance(loaded.inner, _Inner) and loaded.scale == 2.0
    assert loaded.inner.net.in_features == 4 and torch.all(loaded.inner.net.weight == 0.25)
    replacement = _Inner(width=4)
    assert _Outer.load(tmp_path / "o.zip", inner=replacement).inner is replacement


# -- containers mixing stateful objects with plain values -------------------------------------------
class Squad(zipsave.Saveable):
    """Sub-agents in a list, networks beside settings in a dict, a module in a tuple."""

    def __init__(self, size=2, seed=0):
        self.agents = [Module(hidden=4 + i, seed=seed + i) for i in range(size)]
        torch.manual_seed(seed)
        self.nets = {"pi": torch.nn.Linear(2, 2), "lr": 3e-4, "tags": ["a"]}
        self.pair = (torch.nn.Linear(1, 1), "label")
        self.optimizer = torch.optim.SGD(self.nets["pi"].parameters(), lr=0.1)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, 2)


def _trained_squad() -> Squad:
    team = Squad(seed=1)
    team.agents[1].version = 5
    team.nets["lr"], team.pair = 1e-3, (team.pair[0], "renamed")
    for _ in range(3):
        team.nets["pi"](torch.randn(4, 2)).sum().backward()
        team.optimizer.step()
        team.scheduler.step()
    return team


def test_containers_mixing_modules_and_values_keep_every_weight(tmp_path):
    # These were pickled whole into `data`, then skipped on a safe load: fresh weights.
    team = _trained_squad()
    team.save(tmp_path / "team.zip")
    with zipfile.ZipFile(tmp_path / "team.zip") as zf:
        names = set(zf.namelist())
        data = json.loads(zf.read("data"))
    assert {"nets.pi.pth", "pair.0.pth", "agents/0/policy.pth", "agents/1/policy.pth"} <= names
    assert data["nets"] == {"pi": None, "lr": 1e-3, "tags": ["a"]} and "agents" not in data
    loaded = Squad.load(tmp_path / "team.zip", seed=9)  # other seeds: every weight must come from the archive
    for saved, back in zip(team.agents, loaded.agents):
        assert torch.equal(saved.policy[0].weight, back.policy[0].weight)
    assert loaded.agents[1].version == 5
    assert torch.equal(loaded.nets["pi"].weight, team.nets["pi"].weight) and loaded.nets["lr"] == 1e-3
    assert torch.equal(loaded.pair[0].weight, team.pair[0].weight) and loaded.pair[1] == "renamed"
    assert loaded.scheduler.last_epoch == 3
    assert loaded.optimizer.param_groups[0]["params"][0] is loaded.nets["pi"].weight  # filled in place


def test_a_list_of_components_the_constructor_does_not_create_is_rebuilt(tmp_path):
    team = _trained_squad()
    team.save(tmp_path / "team.zip")
    loaded = Squad.load(tmp_path / "team.zip", size=0)
    assert [a.policy[0].out_features for a in loaded.agents] == [4, 5]
    assert torch.equal(loaded.agents[1].policy[0].weight, team.agents[1].policy[0].weight)


def test_a_container_missing_a_saved_module_is_an_error_not_fresh_weights(tmp_path):
    class Settings(zipsave.Saveable):
        def __init__(self, with_net=True):
            self.nets = {"pi": torch.nn.Linear(2, 2), "lr": 1.0} if with_net else {"lr": 2.0}

    Settings().save(tmp_path / "s.zip")
    with pytest.raises(zipsave.ParameterMismatchError, match="nets.pi"):
        zipsave.load(tmp_path / "s.zip", cls=Settings, with_net=False)


def test_modules_nested_in_containers_are_members_at_any_depth(tmp_path):
    class Deep(zipsave.Saveable):
        def __init__(self, seed=0):
            torch.manual_seed(seed)
            self.deep = {
                "a": {"pi": torch.nn.Linear(2, 2), "n": 1},
                "b": [torch.nn.Linear(1, 1), (torch.nn.Linear(1, 2), "five")],
            }

    model = Deep()
    model.deep["a"]["n"] = 7
    model.save(tmp_path / "d.zip")
    with zipfile.ZipFile(tmp_path / "d.zip") as zf:
        assert {"deep.a.pi.pth", "deep.b.0.pth", "deep.b.1.0.pth"} <= set(zf.namelist())
    deep = next(e for e in zipsave.inspect(tmp_path / "d.zip").data if e.key == "deep")
    assert deep.needs_pickle is False  # no module pickled into `data`
    loaded = zipsave.load(tmp_path / "d.zip", cls=Deep, seed=3)
    assert torch.equal(loaded.deep["a"]["pi"].weight, model.deep["a"]["pi"].weight)
    assert torch.equal(loaded.deep["b"][1][0].weight, model.deep["b"][1][0].weight)
    assert loaded.deep["a"]["n"] == 7 and loaded.deep["b"][1][1] == "five"


class _Runner:
    """A plain object holding a module: a component folder without init.json."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.net = torch.nn.Linear(2, 2)


class _Pair(zipsave.Saveable):
    def __init__(self, seed=0):
        self.actor = Module(seed=seed)
        self.critic = Module(seed=seed + 1)
        self.runner = _Runner(seed + 2)
        self.team = [Module(seed=seed + 3), Module(seed=seed + 4)]


@pytest.mark.parametrize("left_out", ["critic", "runner", "team/1", "team"])
def test_a_component_left_out_of_the_save_is_an_error_not_the_constructors_state(tmp_path, left_out):
    pair = _Pair(seed=1)
    zipsave.save(pair, tmp_path / "p.zip", exclude=[left_out])
    with pytest.raises(zipsave.ParameterMismatchError) as err:
        _Pair.load(tmp_path / "p.zip", seed=7)
    message = str(err.value)
    assert "no folder" in message and "exclude=" in message and "p.zip" in message
    assert f"`{left_out}" in message
    live = _Pair(seed=7)
    with pytest.raises(zipsave.ParameterMismatchError):
        zipsave.restore(live, tmp_path / "p.zip")
    # Asked for: the same `exclude=` keeps the constructor's component, the rest comes from the archive.
    loaded = _Pair.load(tmp_path / "p.zip", seed=7, exclude=[left_out])
    assert torch.equal(loaded.actor.policy[0].weight, pair.actor.policy[0].weight)
    assert loaded.zipsave_report.ok
    loose = _Pair.load(tmp_path / "p.zip", seed=7, exact_match=False)
    assert torch.equal(loose.actor.policy[0].weight, pair.actor.policy[0].weight)


def test_every_component_saved_loads_without_complaint(tmp_path):
    pair = _Pair(seed=1)
    zipsave.save(pair, tmp_path / "p.zip")
    loaded = _Pair.load(tmp_path / "p.zip", seed=7)
    assert torch.equal(loaded.critic.policy[0].weight, pair.critic.policy[0].weight)
    assert torch.equal(loaded.runner.net.weight, pair.runner.net.weight)
    assert torch.equal(loaded.team[1].policy[0].weight, pair.team[1].policy[0].weight)


@pytest.mark.parametrize("name", ["\u00b2", "1" * 5000, "x"], ids=["superscript", "digits", "word"])
def test_a_list_component_not_named_by_an_index_is_refused_naming_it(tmp_path, name):
    # `str.isdigit` admits `²` and `int` refuses more than 4300 digits: either raised
    # ValueError out of a restore (reported as an unreadable archive, no member named).
    _trained_squad().save(tmp_path / "team.zip")
    with zipfile.ZipFile(tmp_path / "team.zip") as src, zipfile.ZipFile(tmp_path / "bad.zip", "w") as out:
        for info in src.infolist():
            if info.filename != "manifest.json":
                out.writestr(info.filename.replace("agents/1/", f"agents/{name}/"), src.read(info.filename))
    for load in (lambda p: Squad.load(p), lambda p: zipsave.restore(Squad(), p), zipsave.load):
        with pytest.raises(zipsave.ArchiveFormatError, match="whose items are named by their index") as err:
            load(tmp_path / "bad.zip")
        assert err.value.member == f"agents/{name}"


def test_a_state_dict_asked_for_as_a_component_says_how_to_read_it(tmp_path):
    """`component="policy"` on an SB3-style archive said only `components: []`."""
    zipsave.save({"policy": torch.nn.Linear(2, 2), "step": 1}, tmp_path / "m.zip")
    with pytest.raises(
        zipsave.ArchiveFormatError,
        match=re.escape(
            "has no component `policy`; components: []. `policy.pth` is a state dict, not a component: "
            "`zipsave.load_archive(path)[1]['policy']` reads it, `zipsave.read(path, 'policy/<key>')` one of its tensors."
        ),
    ):
        zipsave.load(tmp_path / "m.zip", component="policy")
    assert set(zipsave.load_archive(tmp_path / "m.zip")[1]["policy"]) == {"weight", "bias"}
