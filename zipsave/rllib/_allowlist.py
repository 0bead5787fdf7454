"""The RLlib globals an archive may name without the caller's say-so, each reviewed.

What is listed: classes and functions that an ``AlgorithmConfig`` state or a component state
refers to by import path (algorithm and config classes, catalogs, the default callback class,
connector pieces, metrics ``Stats`` classes, enums). Importing them runs no archive code; none
of them, called by a pickle, does more than build an RLlib object (no file, process or network
access). A user's own callback class, env creator or connector factory is not listed: loading
names it in an ``UnsafeGlobalError`` with the ``trusted=[...]`` to pass.
"""

from __future__ import annotations

_ALGOS = {
    "ppo": ("ppo", "PPO", "PPOConfig", "ppo_catalog", "PPOCatalog"),
    "appo": ("appo", "APPO", "APPOConfig", None, None),
    "impala": ("impala", "IMPALA", "IMPALAConfig", None, None),
    "dqn": ("dqn", "DQN", "DQNConfig", "dqn_catalog", "DQNCatalog"),
    "sac": ("sac", "SAC", "SACConfig", "sac_catalog", "SACCatalog"),
    "bc": ("bc", "BC", "BCConfig", None, None),
    "marwil": ("marwil", "MARWIL", "MARWILConfig", None, None),
    "cql": ("cql", "CQL", "CQLConfig", None, None),
}


def paired_catalog(package: str) -> str | None:
    """The import path (``module:Name``) of the catalog RLlib pairs with the modules of the
    algorithm package ``package`` (``"ppo"`` -> ``PPOCatalog``), or ``None``."""
    entry = _ALGOS.get(package)
    if entry is None or entry[3] is None:
        return None
    return f"ray.rllib.algorithms.{package}.{entry[3]}:{entry[4]}"


def _algorithm_names() -> list[str]:
    names = []
    for package, (module, algo, config, catalog_module, catalog) in _ALGOS.items():
        base = f"ray.rllib.algorithms.{package}"
        names += [f"{base}.{module}.{algo}", f"{base}.{module}.{config}"]
        if package in ("ppo", "dqn", "sac"):
            names += [
                f"{base}.torch.default_{package}_torch_rl_module.Default{package.upper()}TorchRLModule",
                f"{base}.torch.{package}_torch_learner.{package.upper()}TorchLearner",
            ]
        if catalog_module:
            names.append(f"{base}.{catalog_module}.{catalog}")
    return names


_CONNECTORS = [
    "common.add_observations_from_episodes_to_batch.AddObservationsFromEpisodesToBatch",
    "common.add_states_from_episodes_to_batch.AddStatesFromEpisodesToBatch",
    "common.add_time_dim_to_batch_and_zero_pad.AddTimeDimToBatchAndZeroPad",
    "common.agent_to_module_mapping.AgentToModuleMapping",
    "common.batch_individual_items.BatchIndividualItems",
    "common.numpy_to_tensor.NumpyToTensor",
    "common.tensor_to_numpy.TensorToNumpy",
    "env_to_module.mean_std_filter.MeanStdFilter",
    "env_to_module.env_to_module_pipeline.EnvToModulePipeline",
    "module_to_env.get_actions.GetActions",
    "module_to_env.listify_data_for_vector_env.ListifyDataForVectorEnv",
    "module_to_env.module_to_env_pipeline.ModuleToEnvPipeline",
    "module_to_env.normalize_and_clip_actions.NormalizeAndClipActions",
    "module_to_env.remove_single_ts_time_rank_from_batch.RemoveSingleTsTimeRankFromBatch",
    "module_to_env.unbatch_to_individual_items.UnBatchToIndividualItems",
]

_STATS = [
    "ema.EmaStats",
    "item.ItemStats",
    "item_series.ItemSeriesStats",
    "lifetime_sum.LifetimeSumStats",
    "max.MaxStats",
    "mean.MeanStats",
    "min.MinStats",
    "percentiles.PercentilesStats",
    "sum.SumStats",
]

RLLIB_ALLOWLIST: frozenset[str] = frozenset(
    _algorithm_names()
    + [f"ray.rllib.connectors.{c}" for c in _CONNECTORS]
    + [f"ray.rllib.utils.metrics.stats.{s}" for s in _STATS]
    + [
        "ray.rllib.algorithms.algorithm_config.AlgorithmConfig",
        "ray.rllib.algorithms.algorithm_config.AlgorithmConfig.DEFAULT_POLICY_MAPPING_FN",
        "ray.rllib.algorithms.algorithm_config.TorchCompileWhatToCompile",
        "ray.rllib.callbacks.callbacks.RLlibCallback",
        "ray.rllib.core.models.catalog.Catalog",
        "ray.rllib.evaluation.collectors.simple_list_collector.SimpleListCollector",
        "ray.rllib.core.rl_module.rl_module.RLModuleSpec",
        "ray.rllib.core.rl_module.multi_rl_module.MultiRLModuleSpec",
        "ray.rllib.core.rl_module.multi_rl_module.MultiRLModule",
    ]
)
