"""The Beam graph as dask Bags: what `dask_runner.DaskRunner` runs, one Bag per PCollection.

    pipeline.replace_all(overrides())
    translate = Translate(partitions=8, consumers=count_consumers(pipeline))
    pipeline.visit(translate)
    client.compute(translate.leaves(), optimize_graph=False)

Beam 2.77's own translation (apache_beam.runners.dask.transform_evaluator) cannot run the corpus
builder; each defect it has, and what this module does instead:
  - each PCollection is its *producer's* bag (`self.bags[input_value.producer]`) whatever its tag,
    and `apply_dofn_to_bundle` puts every tag's outputs in one list: a multi-output ParDo (our
    "stats" side outputs) feeds all its outputs to every consumer, and a GroupByKey downstream
    fails in ReifyWindows with "too many values to unpack (expected 2)". Here a multi-output ParDo
    emits (tag, value) pairs, split by tag: every PCollection has its own bag (`Translate._pardo`).
  - it collects a bundle's outputs before `finish_bundle`, so what a DoFn emits there is lost
    (BatchElements' last batch). Here the outputs are taken after it (`_run_bundle`).
  - a side input is a bag that each task computes again inside the worker (`list(self.bag)`):
    TrainVocab would run once per consumer task, and the waiting task holds a worker thread. Here
    a side input is one Delayed that every consumer task depends on (`Translate._side_values`).
  - only the graph reaching the last transform is computed (`list(bags.values())[-1]`). Here
    every PCollection that nothing consumes is computed, in one graph (`Translate.leaves`).
  - each ParDo is a task of its own whose whole output for the partition is one list, held until
    its readers ran: between the second read and tokenizing, a partition's text. Here ParDos that
    each read only the one before run as one task, element by element (`Translate._pardo`,
    `_run_chain`): a worker holds what one element makes.
  - a bounded Read has no translation: it becomes a no-op with nothing to pass on. The builder
    reads with ParDos; a primitive this module does not know is refused before anything runs.
Global windows only (the builder's); another windowing is refused before anything runs.
Imported only where dask is installed (`dask_runner.require_dask`).
"""

from __future__ import annotations

import apache_beam as beam
import dask
import dask.bag as db
from apache_beam import pvalue
from apache_beam.internal import pickler
from apache_beam.pipeline import PipelineVisitor, PTransformOverride

# Beam has no public way to run one bundle of a DoFn outside its own runners: DoFnInvoker is what
# they use, and `_OutputHandler` (private in 2.77) is the receiver wiring its DoFnRunner builds,
# which routes each tagged output to its own receiver (where Beam's Dask translation merges them).
from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler

# Beam's Dask overrides turn Create, Flatten and Reshuffle into these primitives; their classes are
# private in Beam 2.77, and the visitor must recognise them to translate them.
from apache_beam.runners.dask.overrides import _Create, _Flatten, _Reshuffle, dask_overrides
from apache_beam.transforms.sideinputs import SideInputMap
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from common.errors import ConfigError


class _GroupByKey(beam.PTransform):
    """beam.GroupByKey as one primitive: (key, value) -> (key, [values]), global windows."""

    def expand(self, pcoll):
        return pvalue.PCollection.from_(pcoll)


class _GroupByKeyOverride(PTransformOverride):
    def matches(self, applied):
        return applied.transform.__class__ == beam.GroupByKey

    def get_replacement_transform_for_applied_ptransform(self, applied):
        return _GroupByKey()


def overrides() -> list[PTransformOverride]:
    """Beam's Dask overrides (Create, Reshuffle, Read, Flatten as primitives), ours first for
    GroupByKey: one primitive, where Beam's expands to ReifyWindows, a grouping and
    GroupAlsoByWindow."""
    return [_GroupByKeyOverride(), *dask_overrides()]


class Translate(PipelineVisitor):
    """Visits the primitives in topological order and gives each PCollection a bag."""

    def __init__(self, partitions: int, consumers: dict | None = None):
        self.partitions = partitions
        self.bags: dict[pvalue.PCollection, db.Bag] = {}
        self.consumed: set[pvalue.PCollection] = set()
        self._side: dict[pvalue.PCollection, object] = {}
        # Fusion: a ParDo that is the only reader of another ParDo's output joins that ParDo's
        # chain, and a chain runs as one task per partition that passes each element on as it is
        # emitted (`_run_chain`): a worker holds what one element makes, not each step's whole
        # output for the partition. `consumers` (`count_consumers`) says who is the only reader.
        self._consumers = consumers or {}
        self._pending: dict[pvalue.PCollection, tuple[_Chain, int, object]] = {}

    def visit_transform(self, node) -> None:
        transform, label = node.transform, node.full_label
        for pcoll in node.outputs.values():
            if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
                raise ConfigError(
                    f"--runner DaskRunner: {label} makes a {type(pcoll.windowing.windowfn).__name__} "
                    "PCollection; this runner runs global windows only"
                )
        pardo = isinstance(transform, beam.ParDo)  # its input may join a chain: taken in _pardo
        inputs = [] if pardo else [self._input(p) for p in node.inputs if isinstance(p, pvalue.PCollection)]
        if isinstance(transform, _Create):
            values = list(transform.values)
            bag = db.from_sequence(values, npartitions=max(1, min(len(values), self.partitions)))
        elif isinstance(transform, _Flatten):
            bag = db.concat(inputs) if inputs else db.from_sequence([], npartitions=1)
        elif isinstance(transform, _Reshuffle):  # spread elements (files, say) over the workers
            (bag,) = inputs
            if bag.npartitions < self.partitions:
                bag = bag.repartition(self.partitions)
        elif isinstance(transform, _GroupByKey):
            (bag,) = inputs
            bag = bag.groupby(_key_bytes, shuffle="tasks").map(_grouped)
        elif isinstance(transform, beam.ParDo):
            self._pardo(node, node.inputs[0])
            return
        else:
            raise ConfigError(
                f"--runner DaskRunner cannot run {label} ({type(transform).__name__}): this runner "
                "translates Create, ParDo, GroupByKey, Flatten and Reshuffle"
            )
        (out,) = node.outputs.values()
        self.bags[out] = bag

    def _input(self, pcoll):
        self.consumed.add(pcoll)
        return self._bag(pcoll)

    def _bag(self, pcoll):
        """The bag of `pcoll`; a chain that makes it is given its task now, and grows no more."""
        if pcoll in self._pending:
            self._materialize(self._pending[pcoll][0])
        return self.bags[pcoll]

    def _pardo(self, node, pcoll) -> None:
        transform = node.transform
        # Side inputs first: one that comes from the chain this ParDo reads gives that chain its
        # task now, and this ParDo then starts a chain of its own (a step cannot wait on its own
        # chain's output).
        side = []
        for view in node.side_inputs:  # in the order of transform.args' placeholders
            self.consumed.add(view.pvalue)
            side.append(self._side_values(view.pvalue))
        # A side input's view options (how a task reads it: singleton, list, default value) have no
        # public accessor in Beam 2.77; `_view_options()` is what Beam's own runners read.
        views = [(type(view), view._view_options()) for view in node.side_inputs]
        stage = _Stage(node.full_label, (transform.fn, transform.args, transform.kwargs, views), side)
        self.consumed.add(pcoll)
        pending = self._pending.get(pcoll)
        if pending and self._consumers.get(pcoll) == 1 and pending[1] == len(pending[0].stages) - 1:
            chain, last, tag = pending  # this ParDo reads only what the chain's last step emits
            chain.stages[last].forward = tag
            del self._pending[pcoll]
        else:
            chain = _Chain(self._bag(pcoll))
        chain.stages.append(stage)
        # Beam 2.77's translation gives every tag the producer's one bag (a GroupByKey after a
        # multi-output ParDo then fails: "too many values to unpack (expected 2)"): here every
        # (step, tag) of a chain is an exit of its own, selected by its number.
        for tag, out in node.outputs.items():
            self._pending[out] = (chain, len(chain.stages) - 1, tag)

    def _materialize(self, chain) -> None:
        """One task per partition for the chain's steps (`_run_chain`), and a bag per exit."""
        exits = [(out, step, tag) for out, (c, step, tag) in self._pending.items() if c is chain]
        plan = [(stage.label, stage.fn, stage.forward, len(stage.side)) for stage in chain.stages]
        numbered = [(step, tag) for _, step, tag in exits]
        blob = pickler.dumps((plan, numbered))
        side = [value for stage in chain.stages for value in stage.side]
        outputs = chain.source.map_partitions(_run_chain, blob, *side)
        for number, (out, _, _) in enumerate(exits):
            self.bags[out] = outputs if len(exits) == 1 else outputs.map_partitions(_select, number)
            del self._pending[out]

    def _side_values(self, pcoll):
        """A side input as one Delayed list of its elements: computed once (one key in the graph,
        which is computed unoptimized, so no fusion renames or copies it), handed to every task
        that reads it. (Beam 2.77's translation hands each task the bag, which every consuming task
        computes again inside its worker: TrainVocab would train once per consumer.)"""
        if pcoll not in self._side:
            parts = self._bag(pcoll).to_delayed(optimize_graph=False)
            self._side[pcoll] = dask.delayed(_concat, pure=True)(parts)
        return self._side[pcoll]

    def leaves(self) -> list:
        """The bags of PCollections nothing reads, each reduced to its size: computing them all
        computes the whole graph once (Beam's DaskRunner computed only the last transform's)."""
        for pcoll in list(self._pending):
            self._bag(pcoll)  # a chain still growing gets its task
        return [bag.map_partitions(_size) for pcoll, bag in self.bags.items() if pcoll not in self.consumed]


_KEY_CODER = beam.coders.FastPrimitivesCoder().as_deterministic_coder("GroupByKey")


def _key_bytes(kv) -> bytes:
    """Keys group by their deterministic encoding, as on Beam's other runners (1 and 1.0 differ)."""
    return _KEY_CODER.encode(kv[0])


def _grouped(group) -> tuple:
    _, pairs = group
    return pairs[0][0], [value for _, value in pairs]


def _concat(parts: list) -> list:
    return [element for part in parts for element in part]


def _size(part) -> list[int]:
    return [sum(1 for _ in part)]


def _select(part, number) -> list:
    return [value for got, value in part if got == number]


class _Stage:
    """One ParDo of a chain: its label, (fn, args, kwargs, side views) to pickle, its side inputs'
    Delayed values, and the tag whose outputs the next step reads (`_LAST` for the last step)."""

    def __init__(self, label: str, fn: tuple, side: list):
        self.label, self.fn, self.side, self.forward = label, fn, side, _LAST


_LAST = "bertbeam: no step reads on"  # a tag no DoFn emits


class _Chain:
    """ParDos each reading only the one before it: run as one task per partition of `source`."""

    def __init__(self, source):
        self.source, self.stages = source, []


def count_consumers(pipeline) -> dict:
    """How many transforms read each PCollection, as a main or a side input (`Translate` fuses a
    ParDo into the chain before it only when it is that output's one reader)."""
    counts: dict[pvalue.PCollection, int] = {}

    class _Count(PipelineVisitor):
        def visit_transform(self, node) -> None:
            for pcoll in [*node.inputs, *(view.pvalue for view in node.side_inputs)]:
                if isinstance(pcoll, pvalue.PCollection):
                    counts[pcoll] = counts.get(pcoll, 0) + 1

    pipeline.visit(_Count())
    return counts


class _Receivers(dict):
    """The receivers of one step of a chain: the tag the next step reads hands each value straight
    to that step's `process`; any other tag is an exit, collected as (exit number, value)."""

    def __init__(self, step: int, exits: dict, collected: list, forward, next_step):
        super().__init__()
        self._step, self._exits, self._collected = step, exits, collected
        self._forward, self._next = forward, next_step

    def __missing__(self, tag):
        if tag == self._forward:
            receiver = self[tag] = _Forward(self._next)
        else:
            receiver = self[tag] = _Collect(self._exits[(self._step, tag)], self._collected)
        return receiver


class _Forward(Receiver):
    def __init__(self, invoker):
        super().__init__()
        self.invoker = invoker

    def receive(self, windowed: WindowedValue) -> None:
        self.invoker.invoke_process(windowed)


class _Collect(Receiver):
    def __init__(self, number: int, values: list):
        super().__init__()
        self.number, self.values = number, values

    def receive(self, windowed: WindowedValue) -> None:
        self.values.append((self.number, windowed.value))


def _invoker(label: str, spec: tuple, side_values: list, receivers: _Receivers):
    fn, args, kwargs, views = spec
    side_inputs = [
        SideInputMap(view_class, options, [_windowed(v) for v in values])
        for (view_class, options), values in zip(views, side_values, strict=True)
    ]
    handler = _OutputHandler(
        window_fn=GlobalWindows(),
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    return DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )


def _run_chain(elements, blob: bytes, *side_values) -> list:
    """One partition as one bundle of each ParDo of a chain, element by element: each step's
    setup and start_bundle; every element through the first step, whose outputs on the tag the
    next step reads go straight into that step's `process`, and so on; then each step's
    finish_bundle in order (what one emits there flows on before the next finishes); teardown.
    Returns the exits' values: bare if the chain has one exit, else (exit number, value) pairs
    that `_select` parts. A list, not a generator: dask keeps a task's result as returned and
    hands it to each of its consumers, so an iterator would be read by the first one only."""
    plan, numbered = pickler.loads(blob)
    exits = {key: number for number, key in enumerate(numbered)}
    collected: list = []
    invokers: list = [None] * len(plan)
    end = len(side_values)
    for step in reversed(range(len(plan))):  # the last first: each step hands on to the next one
        label, fn, forward, n_side = plan[step]
        following = invokers[step + 1] if step + 1 < len(plan) else None
        receivers = _Receivers(step, exits, collected, forward, following)
        invokers[step] = _invoker(label, fn, list(side_values[end - n_side : end]), receivers)
        end -= n_side
    for invoker in invokers:
        invoker.invoke_setup()
        invoker.invoke_start_bundle()
    for element in elements:
        invokers[0].invoke_process(_windowed(element))
    # Before the outputs are taken: Beam 2.77's translation took them first, so what a DoFn emits
    # in finish_bundle (BatchElements' last batch) was lost.
    for invoker in invokers:
        invoker.invoke_finish_bundle()
    for invoker in invokers:
        invoker.invoke_teardown()
    return [value for _, value in collected] if len(numbered) == 1 else collected


_GLOBAL = (GlobalWindow(),)


def _windowed(value) -> WindowedValue:
    return WindowedValue(value, MIN_TIMESTAMP, _GLOBAL)
