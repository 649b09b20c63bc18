"""The Beam graph as dask Bags: what `dask_runner.DaskRunner` runs, one Bag per PCollection.

    pipeline.replace_all(overrides())
    translate = Translate(partitions=8)
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

    def __init__(self, partitions: int):
        self.partitions = partitions
        self.bags: dict[pvalue.PCollection, db.Bag] = {}
        self.consumed: set[pvalue.PCollection] = set()
        self._side: dict[pvalue.PCollection, object] = {}

    def visit_transform(self, node) -> None:
        transform, label = node.transform, node.full_label
        for pcoll in node.outputs.values():
            if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
                raise ConfigError(
                    f"--runner DaskRunner: {label} makes a {type(pcoll.windowing.windowfn).__name__} "
                    "PCollection; this runner runs global windows only"
                )
        inputs = [self._input(p) for p in node.inputs if isinstance(p, pvalue.PCollection)]
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
            self._pardo(node, inputs[0])
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
        return self.bags[pcoll]

    def _pardo(self, node, bag) -> None:
        transform = node.transform
        side = []
        for view in node.side_inputs:  # in the order of transform.args' placeholders
            self.consumed.add(view.pvalue)
            side.append(self._side_values(view.pvalue))
        # A side input's view options (how a task reads it: singleton, list, default value) have no
        # public accessor in Beam 2.77; `_view_options()` is what Beam's own runners read.
        views = [(type(view), view._view_options()) for view in node.side_inputs]
        blob = pickler.dumps((transform.fn, transform.args, transform.kwargs, views))
        # Beam 2.77's translation gives every tag the producer's one bag (a GroupByKey after a
        # multi-output ParDo then fails: "too many values to unpack (expected 2)"): here a tagged
        # ParDo emits (tag, value) pairs and each PCollection selects its own tag.
        tagged = any(tag is not None for tag in node.outputs)  # with_outputs: (tag, value) pairs
        outputs = bag.map_partitions(_run_bundle, blob, node.full_label, tagged, *side)
        for tag, pcoll in node.outputs.items():
            self.bags[pcoll] = outputs.map_partitions(_select, tag) if tagged else outputs

    def _side_values(self, pcoll):
        """A side input as one Delayed list of its elements: computed once (one key in the graph,
        which is computed unoptimized, so no fusion renames or copies it), handed to every task
        that reads it. (Beam 2.77's translation hands each task the bag, which every consuming task
        computes again inside its worker: TrainVocab would train once per consumer.)"""
        if pcoll not in self._side:
            parts = self.bags[pcoll].to_delayed(optimize_graph=False)
            self._side[pcoll] = dask.delayed(_concat, pure=True)(parts)
        return self._side[pcoll]

    def leaves(self) -> list:
        """The bags of PCollections nothing reads, each reduced to its size: computing them all
        computes the whole graph once (Beam's DaskRunner computed only the last transform's)."""
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


def _select(part, tag) -> list:
    return [value for got, value in part if got == tag]


class _Outputs(dict):
    """The receivers of one bundle: outputs of every tag, in emission order, as (tag, value)."""

    def __init__(self):
        super().__init__()
        self.values: list[tuple] = []

    def __missing__(self, tag):
        receiver = self[tag] = _Receiver(tag, self.values)
        return receiver


class _Receiver(Receiver):
    def __init__(self, tag, values: list):
        super().__init__()
        self.tag, self.values = tag, values

    def receive(self, windowed: WindowedValue) -> None:
        self.values.append((self.tag, windowed.value))


def _run_bundle(elements, blob: bytes, label: str, tagged: bool, *side_values) -> list:
    """One partition as one bundle of a DoFn: setup, start_bundle, process each element,
    finish_bundle, teardown; returns its outputs (with their tags when the ParDo has several).
    A list, not a generator: dask keeps a task's result as returned and hands it to each of its
    consumers, so an iterator would be read by the first one only."""
    fn, args, kwargs, views = pickler.loads(blob)
    side_inputs = [
        SideInputMap(view_class, options, [_windowed(v) for v in values])
        for (view_class, options), values in zip(views, side_values, strict=True)
    ]
    outputs = _Outputs()
    handler = _OutputHandler(
        window_fn=GlobalWindows(),
        main_receivers=outputs[None],
        tagged_receivers=outputs,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn),
        handler,
        context=DoFnContext(label, state=None),
        side_inputs=side_inputs,
        input_args=args,
        input_kwargs=kwargs,
        user_state_context=None,
        bundle_finalizer_param=beam.DoFn.BundleFinalizerParam(),
    )

    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for element in elements:
        invoker.invoke_process(_windowed(element))
    # Before the outputs are taken: Beam 2.77's translation took them first, so what a DoFn emits
    # in finish_bundle (BatchElements' last batch) was lost.
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return outputs.values if tagged else [value for _, value in outputs.values]


_GLOBAL = (GlobalWindow(),)


def _windowed(value) -> WindowedValue:
    return WindowedValue(value, MIN_TIMESTAMP, _GLOBAL)
