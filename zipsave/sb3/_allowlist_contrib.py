"""The sb3-contrib globals that its algorithms' archives pickle, reviewed for the restricted
unpickler like SB3's own (``_allowlist.py``). Plain names only: nothing is imported here."""

from __future__ import annotations

__all__ = ["SB3_CONTRIB_ALLOWLIST"]

# What the ``data`` of sb3-contrib 2.9.2 archives names (ARS, CrossQ, MaskablePPO, QRDQN,
# RecurrentPPO, TQC, TRPO; found with ``pickle_globals`` on archives written by their own
# ``save`` and by ``zipsave.save``), plus the image/Dict siblings of each policy. Reviewed as
# ``_allowlist.py`` says: every module is plain sb3-contrib code (importing it runs nothing the
# archive chose); the classes define no ``__setstate__``/``__reduce__`` beyond ``nn.Module``'s;
# calling one builds an ``nn.Module`` (policies) or allocates zeroed numpy arrays (buffers) of
# the size the arguments ask for, and calls only the callables it is handed, which in a
# restricted load are themselves built from allowlisted globals. TRPO uses SB3's own policies.
# sb3-contrib has no schedule classes of its own; its algorithms use SB3's (already listed).
SB3_CONTRIB_ALLOWLIST: frozenset[str] = frozenset(
    {
        # ARS
        "sb3_contrib.ars.policies.ARSPolicy",
        "sb3_contrib.ars.policies.ARSLinearPolicy",
        # CrossQ
        "sb3_contrib.crossq.policies.CrossQPolicy",
        # MaskablePPO: policies and rollout buffers
        "sb3_contrib.common.maskable.policies.MaskableActorCriticPolicy",
        "sb3_contrib.common.maskable.policies.MaskableActorCriticCnnPolicy",
        "sb3_contrib.common.maskable.policies.MaskableMultiInputActorCriticPolicy",
        "sb3_contrib.common.maskable.buffers.MaskableRolloutBuffer",
        "sb3_contrib.common.maskable.buffers.MaskableDictRolloutBuffer",
        # QRDQN
        "sb3_contrib.qrdqn.policies.QRDQNPolicy",
        "sb3_contrib.qrdqn.policies.CnnPolicy",
        "sb3_contrib.qrdqn.policies.MultiInputPolicy",
        # RecurrentPPO: policies and rollout buffers
        "sb3_contrib.common.recurrent.policies.RecurrentActorCriticPolicy",
        "sb3_contrib.common.recurrent.policies.RecurrentActorCriticCnnPolicy",
        "sb3_contrib.common.recurrent.policies.RecurrentMultiInputActorCriticPolicy",
        "sb3_contrib.common.recurrent.buffers.RecurrentRolloutBuffer",
        "sb3_contrib.common.recurrent.buffers.RecurrentDictRolloutBuffer",
        # `_last_lstm_states`, which sb3-contrib stored until it joined `_excluded_save_params`
        # (2.3 still did): a NamedTuple (tuple.__new__) of tuples of tensors, which load
        # weights-only. `_setup_model` replaces it with zeros, in SB3's `load` as in zipsave's.
        "sb3_contrib.common.recurrent.type_aliases.RNNStates",
        # TQC
        "sb3_contrib.tqc.policies.TQCPolicy",
        "sb3_contrib.tqc.policies.CnnPolicy",
        "sb3_contrib.tqc.policies.MultiInputPolicy",
    }
)
