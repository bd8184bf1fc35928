"""The parts an algorithm is made of, in the manner of FedJAX (client init/step/final, server state + apply).

A local rule is written for ONE client as pure tensor functions of flat parameter vectors; how many clients run at
once (a Python loop, or ``vmap`` over a stacked cohort) is the executor's business, never the rule's. Its state
holds tensors only, so an executor can stack it along a client axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fedrun.process.lazy import torch

if TYPE_CHECKING:
    from fedrun.model.functional import FunctionalModel


State = dict[str, Any]


@dataclass
class ClientContext:
    """What the server broadcasts in a round; read-only for clients."""

    round: int
    params: torch.Tensor  # w_t, flat
    buffers: dict[str, torch.Tensor]  # non-trainable model state (BatchNorm running statistics)
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # server quantities a rule needs
    # the executor made the step state's tensors for this round (a stack of the clients' states) and keeps no other
    # reference to them: a step may update them in place (``LocalRule.descend``)
    in_place: bool = False


@dataclass
class TrainingSet:
    """What a local rule's ``setup`` may read of the run's data before round 1: the training inputs, each client's
    sample indices into them, the model's size and, for a model that declares it, which input feature each parameter
    reads (``parameter_features``: -1 for a feature every sample has, such as a bias's)."""

    x: torch.Tensor
    client_indices: list
    dim: int
    parameter_features: torch.Tensor | None = None


class StatefulPart:
    """A plug point whose rounds change something (a schedule's tau, DGT's baselines, GraB's stale means, a bank's
    models), in the manner of FedJAX's ``init``/``apply``: its settings are attributes fixed at construction, and what
    rounds change is a state that ``init`` makes and its round functions take and return, never changing the one
    they are given. A state holds tensors, numbers, strings, None and dicts or lists of them: the engine keeps it in
    its :class:`~fedrun.engine.run.state.ServerState` and a checkpoint saves it as it is. The fixed schedule (its
    state: the rounds observed and the tau in force, None for E n_i / B) and the local steps it gives a client of 100
    samples at E = 1, B = 10:

    >>> from fedrun.algorithms.schema import make
    >>> fixed = make("schedule", "fixed")
    >>> state = fixed.init()
    >>> fixed.local_steps(state, 100, 1.0, 10)
    10
    """

    # Whether its round reads a single client's update (a row of the (K, d) stack), not only weighted sums of them: a
    # run over several ranks then gives every rank every update instead of all-reducing its sums
    # (engine/execution/ranks.py).
    reads_each_update = False

    def init(self, params: torch.Tensor | None = None, num_clients: int = 0) -> State:
        """The state before round 1, from the initial global model and the number of clients."""
        return {}


class LocalRule:
    """What one client computes in a round, and the server-side bookkeeping that belongs to it.

    Client side: ``client_init`` -> step state (always holds ``w``, the local model, ``buffers`` and ``direction``,
    the direction of the last step);
    ``client_step`` -> (step state, minibatch loss) for one minibatch; ``client_final`` -> (update sent to the
    server, the client's new persistent state or None, extra uploads: a dict of tensors).
    Server side: ``server_init`` -> the rule's server state; ``broadcast`` -> ``ctx.extras`` for the clients;
    ``server_update`` may adjust the aggregated update and update the server state from what clients uploaded.

    A rule is written for one client; the executors run it for a cohort (a loop, or vmapped). A toy rule that takes
    half of plain SGD's step, on a model whose loss is ||w - x||^2 / 2 (its gradient w - x):

    >>> import torch
    >>> from fedrun.algorithms.base import ClientContext, LocalRule
    >>> class HalfStep(LocalRule):
    ...     def client_step(self, model, ctx, state, x, y):
    ...         loss, grad = model.loss_and_grad(state["w"], state["buffers"], x, y)
    ...         self.descend(ctx, state, 0.5 * grad)  # w <- w - lr * direction
    ...         return state, loss
    >>> class Square:
    ...     def loss_and_grad(self, w, buffers, x, y):
    ...         return 0.5 * (w - x).square().sum(), w - x
    >>> rule, ctx = HalfStep(), ClientContext(round=1, params=torch.zeros(2), buffers={}, lr=1.0)
    >>> state = rule.client_init(ctx, None)
    >>> state, loss = rule.client_step(Square(), ctx, state, torch.tensor([2.0, 4.0]), None)
    >>> update, client_state, uploads = rule.client_final(ctx, state, None)
    >>> update, float(loss)
    (tensor([1., 2.]), 10.0)
    """

    name = "rule"
    # Hooks the engine reads; a rule sets those it needs.
    batches_per_step = 1  # minibatches one step consumes (Per-FedAvg's meta-step: 2, or 3 Hessian-free)
    needs_full_gradients = False  # the round starts with each client's full local gradient, given to round_extras
    personalizes = False  # evaluation also scores each client's personalize(...) model (Per-FedAvg)
    # What the other parts may rely on, checked before a run (algorithms.check_parts):
    reports_step_counts = False  # uploads FedNova's a_i ("a"), so algo/aggregator=fednova can normalise by it
    one_gradient_per_step = True  # a step's direction is one minibatch gradient, which a step selector may herd
    trains_a_bank = False  # its clients can start from a preferred model of MA-/GA-FSVRG's bank with its anchor
    pooling_removes_its_correction = False  # with one client holding all data (centralized) it reduces to SGD
    reads_each_update = False  # server_update reads a single client's update, not only sums (StatefulPart's)
    releases_more: str | None = None  # what else of a client's data the server reads (refused under DP), or None
    per_sample = False  # takes each sample's gradient (DP-SGD): a model with BatchNorm statistics is refused
    # client_step on a (K, ...) stack of step states computes each row as it computes one client's (its operations
    # are elementwise over clients, with context scalars): the vmap executor then steps a model whose gradient is
    # by hand (FunctionalModel.chain) without vmap. Read from the class that declares it, never inherited, so a
    # subclass that adds a per-client reduction is not stacked by mistake.
    batchable = False
    # client_step is ``descend(direction(grad))`` with ``direction`` and ``descend`` affine in the state's w and
    # momentum, the context's params and the gradient (its other state entries: numbers that do not depend on them),
    # so a block of steps may run on coefficient vectors over those (engine/blocked.py, one-layer models). Read from
    # the declaring class only, as batchable.
    affine_step = False

    def round_extras(self, server_state: State, full_grads: torch.Tensor, sizes: torch.Tensor
                     ) -> tuple[dict[str, torch.Tensor], State]:
        """With ``needs_full_gradients``: server quantities for ``ctx.extras`` from the round's full local gradients
        (K, d) and the clients' sample counts, and the rule's new server state."""
        raise NotImplementedError

    def spent(self, clients: dict[int, State]) -> dict[str, float]:
        """What an evaluated round's row says of the clients' persistent states (DP-SGD: the privacy spent)."""
        return {}

    def setup(self, server_state: State, data: TrainingSet) -> tuple[State, dict[int, State]]:
        """Before round 1: the rule's server state and each client's initial persistent state, from the run's
        training data (FSVRG's Lambda_i and omega^j). By default, as they are: no client state."""
        return server_state, {}

    def personalize(self, model: FunctionalModel, ctx: ClientContext, x: torch.Tensor, y: torch.Tensor
                    ) -> torch.Tensor:
        """With ``personalizes``: the client's model adapted from the global one on the batch (x, y)."""
        raise NotImplementedError

    def server_init(self, params: torch.Tensor, num_clients: int) -> State:
        """The rule's server state before round 1 (SCAFFOLD's c, FedDyn's h), from the initial model and the number
        of clients; empty by default."""
        return {}

    def broadcast(self, server_state: State) -> dict[str, torch.Tensor]:
        """What the server sends every client beside w_t (``ctx.extras``: SCAFFOLD's c); none by default."""
        return {}

    def client_init(self, ctx: ClientContext, client_state: State | None) -> State:
        """A client's step state at the round's start, from the broadcast and its persistent state (None before it
        first takes part): ``w`` (a copy of w_t), ``buffers`` and a zero ``direction``, plus what the rule adds."""
        return {"w": ctx.params.clone(), "buffers": {k: v.clone() for k, v in ctx.buffers.items()},
                "direction": torch.zeros_like(ctx.params)}

    @staticmethod
    def descend(ctx: ClientContext, state: State, direction: torch.Tensor) -> None:
        """w <- w - eta * direction, keeping the direction (what a step selector such as BHerd herds). In place where
        the executor allows it (``ctx.in_place``): a cohort's w is then read and written once, not copied into new
        memory (GIFT's CIFAR cohort on a CPU: ``python -m fedrun.bench.workloads --only lenet5_cifar_100``)."""
        state["direction"] = direction
        w = state["w"]
        state["w"] = w.add_(direction, alpha=-ctx.lr) if ctx.in_place else torch.add(w, direction, alpha=-ctx.lr)

    def client_step(self, model: FunctionalModel, ctx: ClientContext, state: State, x: torch.Tensor,
                    y: torch.Tensor) -> tuple[State, torch.Tensor]:
        """One local step on the minibatch (x, y): (the new step state, the minibatch's loss). Its ``direction`` is
        what a step selector herds."""
        raise NotImplementedError

    def client_final(self, ctx: ClientContext, state: State, client_state: State | None
                     ) -> tuple[torch.Tensor, State | None, dict[str, torch.Tensor]]:
        """After the client's last step: (its update w_i - w_t, its new persistent state or None, extra uploads such
        as FedNova's ``a`` or SCAFFOLD's control-variate change)."""
        return state["w"] - ctx.params, client_state, {}

    def server_update(self, server_state: State, aggregated: torch.Tensor, updates: torch.Tensor,
                      uploads: dict[str, torch.Tensor], weights: torch.Tensor, num_clients: int
                      ) -> tuple[torch.Tensor, State]:
        """On the server, from the aggregate, the cohort's updates (K, d), its uploads and weights: (the update the
        server optimiser applies, the rule's new server state); the aggregate and the state as they are by
        default."""
        return aggregated, server_state


class Harmonizer(Protocol):
    """A server-side harmoniser (``algo/harmonizer``, a :class:`StatefulPart`): called on the round's stacked updates
    before aggregation, ``(state, updates (K, d), weights (K,), client ids, round) -> (new state, harmonised updates
    (K, d), what it logs)``. FedGH on two conflicting updates projects each off the other:

    >>> import torch
    >>> from fedrun.algorithms.schema import make
    >>> fedgh = make("harmonizer", "fedgh", seed=0)
    >>> state, sent, logged = fedgh(fedgh.init(), torch.tensor([[1.0, 0.0], [-1.0, 1.0]]), torch.tensor([0.5, 0.5]),
    ...                             [0, 1], 1)
    >>> sent
    tensor([[0.5000, 0.5000],
            [0.0000, 1.0000]])
    """

    name: str

    def __call__(self, state: State, updates: torch.Tensor, weights: torch.Tensor, clients: list[int], rnd: int
                 ) -> tuple[State, torch.Tensor, dict[str, float]]: ...


class Aggregator(Protocol):
    """The aggregate of a round's updates: ``weights(sizes)`` gives p_i from the clients' sample counts, and the call
    ``(updates (K, d), weights (K,), uploads) -> (d,)`` the update the server optimiser applies. The mean:

    >>> import torch
    >>> from fedrun.algorithms.schema import make
    >>> mean = make("aggregator", "mean")
    >>> mean(torch.tensor([[1.0, 0.0], [3.0, 2.0]]), torch.tensor([0.5, 0.5]), {})
    tensor([2., 1.])
    """

    name: str

    def __call__(self, updates: torch.Tensor, weights: torch.Tensor, uploads: dict[str, torch.Tensor]
                 ) -> torch.Tensor: ...


class ServerOptimizer(Protocol):
    """The server's step: ``init(params)`` -> its state (momenta, moments); ``apply(params, update, state)`` ->
    (new params, new state), where the update is the aggregate of w_i - w_t (so SGD with lr 1 adds it: FedAvg).

    >>> import torch
    >>> from fedrun.algorithms.schema import make
    >>> sgd = make("server_opt", "sgd", lr=0.5)
    >>> sgd.apply(torch.tensor([1.0, 1.0]), torch.tensor([2.0, -2.0]), sgd.init(torch.zeros(2)))[0]
    tensor([2., 0.])
    """

    name: str

    def init(self, params: torch.Tensor) -> State: ...

    def apply(self, params: torch.Tensor, update: torch.Tensor, state: State) -> tuple[torch.Tensor, State]: ...


class StepSelector(Protocol):
    """Which of its local steps a client's update is made of (``algo/step_selector``): every one (the default),
    BHerd's herded subset, GraB's balanced order, or a random subset. A selector that ``records_steps`` has each
    client keep its step gradients z (tau_i, d), and ``select`` runs where the clients trained; ``finish`` runs on
    the server. BHerd at alpha = 0.5 on one client's four steps keeps the two whose running mean stays nearest the
    mean of all four, and sends -eta (E / alpha) times their sum:

    >>> import torch
    >>> from types import SimpleNamespace
    >>> from fedrun.algorithms.schema import make
    >>> herd = make("step_selector", "herd", alpha=0.5, local_epochs=1.0)
    >>> z = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0], [1.0, 1.0]])
    >>> ctx, plan = ClientContext(round=1, params=torch.zeros(2), buffers={}, lr=0.1), SimpleNamespace(id=0, tau=4)
    >>> chosen = herd.select(herd.init(), -0.1 * z.sum(0, keepdim=True), [z], [plan], ctx)
    >>> chosen.counts, chosen.sums, chosen.sent
    (tensor([2]), tensor([[2., 1.]]), tensor([[-0.4000, -0.2000]]))
    """

    name: str
    records_steps: bool  # the clients keep their step gradients for ``select``

    def init(self, params: torch.Tensor | None = None, num_clients: int = 0) -> State:
        """The selector's state before round 1 (GraB's stale step means; empty for the others)."""
        ...

    def select(self, state: State, updates: torch.Tensor, steps: list[torch.Tensor], plans: list,
               ctx: ClientContext, block: int | None = None) -> Selection:
        """With ``records_steps``, on the clients' side: from their updates (K, d), each one's step gradients
        (tau_i, d) and plans (``id``, ``tau``), the :class:`Selection` (what each sends, and what the server's
        diagnostics read); ``block``: the Gram matrix in column blocks of that many coordinates, or None."""
        ...

    def finish(self, state: State, updates: torch.Tensor, selection: Selection | None, plans: list,
               uploads: dict[str, torch.Tensor], weights: torch.Tensor
               ) -> tuple[State, torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
        """On the server: (its new state, the updates it aggregates, the uploads, the round's metrics.csv columns);
        ``selection`` is None for a selector that records no steps."""
        ...


@dataclass
class Selection:
    """What the clients' step selection made, each field stacked along the clients in cohort order (so that ranks'
    shares of it are reassembled as the updates are): the update each sends, the sum g_i of its selected steps
    (eq. 5), their number k_i, ||g_i / k_i - mu_i|| (Fig. 6), ||g_i / alpha - sum_l z_l|| / ||sum_l z_l||, the mean of
    its steps where the selector keeps it for the next round (GraB; else no columns), and the megabytes its stored
    steps took."""

    sent: torch.Tensor
    sums: torch.Tensor
    counts: torch.Tensor
    distances: torch.Tensor
    residuals: torch.Tensor
    means: torch.Tensor
    steps_mb: torch.Tensor


@dataclass
class CohortResult:
    """What the cohort's training gives the round, per client in cohort order: the executors make it, the round
    reads it."""

    updates: torch.Tensor  # (K, d)
    buffers: list[dict[str, torch.Tensor]]
    mean_loss: torch.Tensor  # (K,) mean minibatch loss of each client
    client_states: list[State | None]
    uploads: dict[str, torch.Tensor]  # what else the clients sent, stacked: name -> (K, ...)
    steps: list[torch.Tensor] | None  # with record=True: each client's step directions, (tau_i, d)
    selection: Selection | None = None  # a step selector's work on the steps, which it replaces (the round's select)
