"""The trackers a run's records go out to (torch-free; issue 48): TensorBoard's event files, which TensorBoard reads
(``tensorboard --logdir DIR``) and W&B (``wandb sync DIR``), Aim (``aim convert tensorboard``), trackio
(``trackio.import_tf_events``) and SwanLab import; and one CSV per run with a ``step`` column (pandas,
``trackio.import_csv``). A family (docs/modules.md, "Families"): one ``Tracker`` row each in one table, ``TRACKERS``,
from which ``octlm export``'s subcommands (their names and help) are made. A row carries its help, the packages it
imports (inside its functions only, checked before anything is read), its writer (one run's records, config and
fingerprints into the folder it is given, under ``<group>/``), whether ``training.tensorboard`` writes it live while
training (``run/live`` drives this module's ``Events`` then), the precision its scalars keep, and its reader: the
tool's own (TensorBoard's event accumulator; trackio's importer), which tests/exchange/test_trackers.py holds every
file to.

A run is an experiment's main track: its run file (``runs/<ID>.jsonl``, every resume in it), its config and its
fingerprints. TensorBoard gets each of ``SCALARS`` at the record's step as a 32-bit float (``simple_value``, what every
importer reads), the config as hyperparameters (its HParams dashboard) and the fingerprints and config as text; the
CSV every number of the run file, as Python writes a float (exactly).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import yaml

from octlm.config import flatten
from octlm.core.fsutil import atomic_write
from octlm.core.records import NUMBER_FIELDS, RunRecord, ShownFingerprints
from octlm.core.records.freeform import ConfigTree

SCALARS: dict[str, str] = {  # TensorBoard's tag -> the run file's field (core.records.RunRecord)
    "train/loss": "train_loss",
    "train/learning_rate": "lr",
    "train/gradient_norm": "gradient_norm",
    "eval/loss": "eval_loss",
    "eval/loss_se": "eval_loss_se",
    "eval/perplexity": "perplexity",
    "eval/perplexity_se": "perplexity_se",
    "eval/bits_per_byte": "bits_per_byte",
    "eval/bits_per_byte_se": "bits_per_byte_se",
    "speed/tokens_per_second": "tokens_per_second",
}
METRIC_TAGS = ("eval/loss", "eval/bits_per_byte", "eval/perplexity", "train/loss")  # the HParams dashboard's columns
FINGERPRINTS_TAG, CONFIG_TAG = "octlm/fingerprints", "octlm/config"  # the text TensorBoard shows


@dataclass(frozen=True)
class RunOut:
    """One run as a tracker is given it."""

    experiment_id: str
    group: str  # the folder its seed replicates share (``exchange.tracking.groups``)
    records: Sequence[RunRecord]  # its run file's
    config: ConfigTree
    fingerprints: ShownFingerprints
    started: float  # when it began (seconds since the epoch): a record's wall time is this plus its elapsed_seconds


class ReadBack(TypedDict):
    """What a tracker's own reader finds of one run."""

    scalars: dict[str, list[tuple[int, float]]]  # the run file's field -> (step, value), in step order
    config: ConfigTree | None  # the hyperparameters by dotted key (None: the tracker keeps none)
    text: dict[str, str]  # tag -> the text shown


@dataclass(frozen=True)
class Tracker:
    """One member of the family."""

    help: str  # what it writes, in its ``octlm export`` subcommand's help
    needs: tuple[str, ...]  # the packages its writer imports (the trackers extra), checked before anything is read
    write: Callable[[Path, RunOut], list[str]]  # one run into the folder DIR; its files' paths relative to DIR
    live: bool  # written while training too, with training.tensorboard
    keeps_config: bool  # the config kept as hyperparameters, the fingerprints (``show ID``'s) as text
    bits: int  # the precision the tool keeps a scalar at: 32 (a float32) or 64 (the run file's float itself)
    read: Callable[[Path], dict[str, ReadBack]]  # the tool's own reader over DIR: {a run's path in DIR: what it read}
    reader_needs: tuple[str, ...]  # the packages that reader imports


# ---------------------------------------------------------------- TensorBoard


def _number(value: object) -> float | None:
    """A finite number as a float (None: anything else, a hand-edited run file's text or a diverged run's NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class Events:
    """One run's TensorBoard event file, written through ``tensorboard``'s own writer: ``header`` (the config as
    hyperparameters, the fingerprints and config as text), then ``record`` by record. ``purge_step``: the first step
    a session takes, from which TensorBoard hides what earlier files of the folder hold (a resume cut the run file
    there too)."""

    def __init__(self, folder: Path, purge_step: int | None = None, flush_secs: float = 120):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._writer = EventFileWriter(str(folder), flush_secs=flush_secs)
        if purge_step is not None:
            self._writer.add_event(Event(step=purge_step, session_log=SessionLog(status=SessionLog.START)))

    def header(self, experiment_id: str, config: ConfigTree, prints: ShownFingerprints, wall_time: float) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        table = "\n".join(f"| {name} | {value or '(not recorded)'} |" for name, value in prints.items())
        yaml_text = yaml.safe_dump(dict(config), sort_keys=False, allow_unicode=True)
        values = [
            *_hparams(config),
            _text(FINGERPRINTS_TAG, f"{experiment_id}\n\n| fingerprint | sha256 |\n|---|---|\n{table}"),
            _text(CONFIG_TAG, "\n".join("    " + line for line in yaml_text.splitlines())),  # a code block
        ]
        self._writer.add_event(Event(wall_time=wall_time, step=0, summary=Summary(value=values)))

    def record(self, record: RunRecord, wall_time: float) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [(tag, _number(record.get(field))) for tag, field in SCALARS.items()]
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=v) for tag, v in values if v is not None])
        if summary.value:
            self._writer.add_event(Event(wall_time=wall_time, step=int(record["step"]), summary=summary))

    def close(self) -> None:
        self._writer.close()


def _plugin(name: str, content: bytes) -> Any:
    from tensorboard.compat.proto.summary_pb2 import SummaryMetadata

    return SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=name, content=content))


def _text(tag: str, text: str) -> Any:
    """A value of TensorBoard's text plugin (Markdown)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)])
    tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode("utf-8")], tensor_shape=shape)
    return Summary.Value(
        tag=tag, metadata=_plugin("text", TextPluginData(version=0).SerializeToString()), tensor=tensor
    )


def _hparams(config: ConfigTree) -> list[Any]:
    """The HParams plugin's experiment (which keys and metrics) and session start (this run's values): every key of
    the config by its dotted name, a number, text or a boolean (a list as its JSON)."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionStartInfo

    start, infos = SessionStartInfo(), []
    for key, value in flatten(dict(config)).items():
        if value is None:
            continue
        kind, field = _hparam_kind(value)
        setattr(start.hparams[key], field, value if isinstance(value, (bool, int, float, str)) else json.dumps(value))
        infos.append(api_pb2.HParamInfo(name=key, type=kind))
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in METRIC_TAGS]
    version = metadata.PLUGIN_DATA_VERSION
    experiment = HParamsPluginData(
        experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics), version=version
    )
    session = HParamsPluginData(session_start_info=start, version=version)
    return [
        Summary.Value(
            tag=metadata.EXPERIMENT_TAG, metadata=_plugin(metadata.PLUGIN_NAME, experiment.SerializeToString())
        ),
        Summary.Value(
            tag=metadata.SESSION_START_INFO_TAG, metadata=_plugin(metadata.PLUGIN_NAME, session.SerializeToString())
        ),
    ]


def _hparam_kind(value: object) -> tuple[int, str]:
    from tensorboard.plugins.hparams import api_pb2

    if isinstance(value, bool):
        return api_pb2.DATA_TYPE_BOOL, "bool_value"
    if isinstance(value, (int, float)):
        return api_pb2.DATA_TYPE_FLOAT64, "number_value"
    return api_pb2.DATA_TYPE_STRING, "string_value"


def write_events(folder: Path, run: RunOut) -> list[str]:
    """``DIR/<group>/<ID>/events.out.tfevents...``: the header, then every record of the run file."""
    where = folder / run.group / run.experiment_id
    events = Events(where)
    events.header(run.experiment_id, run.config, run.fingerprints, run.started)
    for record in run.records:
        events.record(record, run.started + (_number(record.get("elapsed_seconds")) or 0.0))
    events.close()
    return [str(path.relative_to(folder)) for path in sorted(where.iterdir())]


def read_events(folder: Path) -> dict[str, ReadBack]:
    """TensorBoard's own reader (``event_accumulator``, which hides what a resume's purge step says): each folder of
    event files under DIR, its scalars by the run file's field, its hyperparameters and its text."""
    from tensorboard.backend.event_processing import event_accumulator

    found: dict[str, ReadBack] = {}
    for where in sorted({path.parent for path in folder.rglob("*tfevents*")}):
        guidance = {event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
        accumulator = event_accumulator.EventAccumulator(str(where), size_guidance=guidance)
        accumulator.Reload()
        tags = accumulator.Tags()
        found[str(where.relative_to(folder))] = {
            "scalars": {SCALARS[t]: [(e.step, e.value) for e in accumulator.Scalars(t)] for t in tags["scalars"]},
            "config": _hparams_read(accumulator),
            "text": {t: accumulator.Tensors(t)[-1].tensor_proto.string_val[0].decode() for t in tags["tensors"]},
        }
    return found


def _hparams_read(accumulator: Any) -> dict[str, Any] | None:
    """The hyperparameters of a folder's session start, by dotted key (None: it has none)."""
    from tensorboard.plugins.hparams import metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    try:
        content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)[metadata.SESSION_START_INFO_TAG]
    except KeyError:  # no hyperparameters in the folder
        return None
    hparams = HParamsPluginData.FromString(content).session_start_info.hparams
    return {key: getattr(value, value.WhichOneof("kind")) for key, value in hparams.items()}


# ---------------------------------------------------------------- CSV


def write_csv(folder: Path, run: RunOut) -> list[str]:
    """``DIR/<group>/<ID>.csv``: ``step``, then every number the run file holds (in ``RunRecord``'s order), a row a
    record, a cell left empty where the record has none."""
    fields = [f for f in NUMBER_FIELDS if f != "step" and any(_number(r.get(f)) is not None for r in run.records)]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", *fields])
    for record in run.records:
        writer.writerow([record["step"], *("" if _number(record.get(f)) is None else record.get(f) for f in fields)])
    path = folder / run.group / f"{run.experiment_id}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, buffer.getvalue().encode("utf-8"))
    return [str(path.relative_to(folder))]


def read_csv(folder: Path) -> dict[str, ReadBack]:
    """trackio's own importer (``trackio.import_csv``), each CSV into a project of its own (trackio refuses to import
    into one that exists), read back from trackio's store under the names it gives the columns, then removed."""
    import trackio
    from trackio.sqlite_storage import SQLiteStorage
    from trackio.utils import simplify_column_names

    found: dict[str, ReadBack] = {}
    for path in sorted(folder.rglob("*.csv")):
        project = f"octlm-read-{secrets.token_hex(6)}"
        with contextlib.redirect_stdout(io.StringIO()):  # it prints where its dashboard is
            trackio.import_csv(path, project=project, name=path.stem)
        named = {short: name for name, short in simplify_column_names(next(csv.reader(path.open()))).items()}
        logs = SQLiteStorage.get_logs(project, path.stem)
        with contextlib.redirect_stdout(io.StringIO()):
            trackio.delete_project(project, force=True)
        scalars: dict[str, list[tuple[int, float]]] = {}
        for log in logs:
            for short, value in log.items():
                if short in named and named[short] != "step":
                    scalars.setdefault(named[short], []).append((int(log["step"]), float(value)))
        found[str(path.relative_to(folder).with_suffix(""))] = {"scalars": scalars, "config": None, "text": {}}
    return found


# The family's one table: a new tracker is a writer and a reader above and a row here.
TRACKERS: dict[str, Tracker] = {
    "tensorboard": Tracker(
        "TensorBoard event files, a folder a run (wandb sync, aim convert tensorboard, trackio.import_tf_events and "
        "tensorboard --logdir read them)",
        ("tensorboard",),
        write_events,
        live=True,
        keeps_config=True,
        bits=32,
        read=read_events,
        reader_needs=("tensorboard",),
    ),
    "csv": Tracker(
        "one CSV a run with a step column (pandas.read_csv, trackio.import_csv)",
        (),
        write_csv,
        live=False,
        keeps_config=False,
        bits=64,
        read=read_csv,
        reader_needs=("trackio",),
    ),
}
