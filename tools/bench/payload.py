"""Message bodies of the benchmark workers: the same bytes on both servers."""


def make_payload(size: int) -> bytes:
    pattern = b"0123456789abcdefghijklmnopqrstuvwxyz"
    return (pattern * (size // len(pattern) + 1))[:size]
