"""test_fake_server.py - the Python client against a fake loaderd that answers a job open with
crafted numbers and a ring memfd built here: each number out of range is a LoaderdError naming
the field, the same number at its limit is accepted. Regression: a reply with steps_per_epoch 0
killed the Python process with SIGFPE (ldc_token divided by it). The C side's cases, one per
field of the reply, the ring's header, slot headers and stats: tests/test_ldc.c."""
import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading

import pytest

pytest.importorskip("numpy", reason="the Python client tests need numpy (pip install numpy)")

import loaderd  # noqa: E402
from loaderd import _lib as L  # noqa: E402

CTL_MAGIC, CTL_VERSION, CTL_JOB_OK = 0x3143444C, 2, 2
SLOTS, SLOT_SIZE, SLOTS_OFFSET = 2, 8192, 8192   # batch 1 of 64 raw bytes (shm/ring.c layout)


def ring_fd(spe, total):
    """A sealed memfd holding a valid ring header: 2 slots of one raw 64-byte sample."""
    h = L.ring_hdr()
    ctypes.memmove(ctypes.addressof(h), L.RING_MAGIC, 8)  # h.magic would be a copy
    h.version, h.header_size = L.RING_VERSION, L.RING_HEADER_SIZE
    h.total_size = SLOTS_OFFSET + SLOTS * SLOT_SIZE
    h.states_offset, h.slots_offset, h.slot_size = L.RING_HEADER_SIZE, SLOTS_OFFSET, SLOT_SIZE
    h.slots, h.batch, h.sample_bytes = SLOTS, 1, 64
    h.dtype, h.layout = L.RING_DTYPE_U8, L.RING_LAYOUT_RAW
    h.flags_off, h.labels_off, h.ids_off, h.payload_off = 64, 72, 80, 4096
    h.rank, h.world, h.job_id = 0, 1, 1
    h.first_step, h.steps_total, h.steps_per_epoch = 0, total, spe
    fd = os.memfd_create("fake-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, h.total_size)
    os.pwrite(fd, bytes(h), 0)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


def serve(lsock, samples, spe, total):
    """Answer one job open with (samples, spe, total), then wait for the client to hang up."""
    conn, _ = lsock.accept()
    with conn:
        conn.settimeout(10)
        _, anc, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(4 * 4))
        for level, kind, data in anc:        # the dataset the client passed open
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in struct.unpack(f"{len(data) // 4}i", data):
                    os.close(fd)
        body = struct.pack("<5Q16sQ", 1, 0, total, spe, samples, b"", 0)
        hdr = struct.pack("<IHHII", CTL_MAGIC, CTL_VERSION, CTL_JOB_OK, 16 + len(body), 0)
        fds = [ring_fd(spe, total), os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)]
        try:
            conn.sendmsg([hdr + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                         struct.pack("2i", *fds))])
        finally:
            for fd in fds:
                os.close(fd)
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass


# (samples, steps_per_epoch, steps_total of a 1-epoch job, the field named or None: accepted)
CASES = [
    (4, 0, 0, "steps_per_epoch"),      # the SIGFPE
    (4, 1, 1, None),
    (4, 4, 4, None),
    (4, 5, 5, "steps_per_epoch"),      # more steps than samples
    (0, 1, 1, "samples"),
    (4, 4, 5, "steps_total"),
    (4, 4, 3, "steps_total"),
]


@pytest.mark.parametrize("samples,spe,total,field", CASES)
def test_job_reply_numbers_are_checked(tmp_path, samples, spe, total, field):
    dataset = tmp_path / "d.dpk"
    dataset.write_bytes(b"")
    path = str(tmp_path / "s.sock")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(path)
    lsock.listen(1)
    t = threading.Thread(target=serve, args=(lsock, samples, spe, total), daemon=True)
    t.start()
    it = loaderd.Loader(path, dataset, 1, crop=None, epochs=1, output="numpy", job="fake")
    try:
        if field is None:
            assert len(it) == spe and it.samples == samples
            assert it.state_dict()["token"] is not None   # ldc_token divides by spe
        else:
            with pytest.raises(loaderd.LoaderdError) as ei:
                it.open()
            assert ei.value.errno == errno.EBADMSG
            assert f"{field}:" in str(ei.value)
    finally:
        it.close()
        t.join(10)
        lsock.close()
    assert not t.is_alive()
