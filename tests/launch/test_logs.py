"""The run's TensorBoard event files (`launch/logs.py`): each is written whole under a temporary
name TensorBoard does not read, so a run killed mid-flush leaves nothing TensorBoard would take
for a second event file (the gs:// kill test once found one: 3 files for 2 processes)."""

from tensorboard.backend.event_processing import io_wrapper

from launch.logs import EventFile


def test_an_event_file_flushes_whole_and_its_partial_copy_is_not_an_event_file(tmp_path):
    events = EventFile(str(tmp_path))
    events.scalars(3, {"loss": 2.5})
    events.flush()
    assert [p.name for p in tmp_path.iterdir()] == [events.path.rsplit("/", 1)[1]]
    assert io_wrapper.IsTensorFlowEventsFile(events.path)
    assert not io_wrapper.IsTensorFlowEventsFile(events.partial)  # a killed flush's leftover
    (tmp_path / events.partial.rsplit("/", 1)[1]).write_bytes(b"partial")  # as a SIGKILL leaves it
    found = [p for p in tmp_path.iterdir() if io_wrapper.IsTensorFlowEventsFile(str(p))]
    assert len(found) == 1
    events.scalars(4, {"loss": 2.4})
    events.flush()  # the same process overwrites its own partial copy
    assert sorted(p.name for p in tmp_path.iterdir()) == [events.path.rsplit("/", 1)[1]]
