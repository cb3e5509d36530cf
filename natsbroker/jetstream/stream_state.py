"""A stream's ``state`` as its info reports it (STREAM.INFO, CREATE, snapshots)."""

from natsbroker.jetstream import stream_models as SM


def stream_state(stream, subjects_filter=None, deleted_details=False):
    """The ``StreamState`` of ``stream`` from its store; ``subjects_filter``
    adds per-subject counts, ``deleted_details`` the deleted sequences."""
    st = stream.store.state()
    state = SM.StreamState(messages=st.msgs, bytes=st.bytes, first_seq=st.first_seq,
                           first_ts=st.first_ts, last_seq=st.last_seq, last_ts=st.last_ts,
                           num_subjects=st.num_subjects, num_deleted=st.num_deleted,
                           consumer_count=len(stream.consumers))
    if deleted_details and st.num_deleted:
        state.deleted = stream.store.deleted()
    if st.lost is not None:
        state.lost = SM.LostStreamData(msgs=list(st.lost[0]) or None, bytes=st.lost[1])
    if subjects_filter:
        counts = stream.store.subject_counts(subjects_filter.encode())
        state.subjects = {k.decode(errors="replace"): v for k, v in counts.items()} or None
    return state
