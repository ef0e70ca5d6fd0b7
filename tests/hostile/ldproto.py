# ldproto.py - loaderd control protocol by hand (docs/RING.md, "Control socket") for the hostile
# repros in this folder: a job open and shard batches with any descriptors (SCM_RIGHTS).
import socket, struct, os, array
MAGIC=0x3143444c
def hdr(t, blen): return struct.pack('<IHHII', MAGIC, 2, t, 16+blen, 0)
def job_open(job=b'j', dataset=b'/x', seed=1, start_epoch=0, epochs=1, batch=4, crop=(0,0), tf=0,
             rank=0, world=1, sampling=1, tail=0, on_bad=1, slots=0, start=0, at_epoch=0, at_step=0,
             dsid=b'\0'*16, share=0, share_gid=0, owner_uid=0, weight=0, balance=0):
    b = job.ljust(64, b'\0') + dataset.ljust(1024, b'\0')
    b += struct.pack('<QQIIIIIIIIIIII', seed, start_epoch, epochs, batch, crop[0], crop[1], tf,
                     rank, world, sampling, tail, on_bad, slots, start)
    b += struct.pack('<QQ', at_epoch, at_step) + dsid
    b += struct.pack('<IIIHH', share, share_gid, owner_uid, weight, balance)
    assert len(b) == 64+1024+112, len(b)
    return b
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect(path); return s
def send(s, t, body, fds=()):
    m = hdr(t, len(body)) + body
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', fds))] if fds else []
    return s.sendmsg([m], anc)
def recv(s, timeout=10):
    s.settimeout(timeout)
    msg, anc, fl, _ = s.recvmsg(65536, socket.CMSG_SPACE(4*8))
    fds=[]
    for lvl, typ, data in anc:
        if typ == socket.SCM_RIGHTS:
            a = array.array('i'); a.frombytes(data[:len(data)-len(data)%4]); fds += list(a)
    if not msg: return None, b'', fds
    magic, ver, t, ln, _ = struct.unpack('<IHHII', msg[:16])
    return t, msg[16:], fds
def err_text(body):
    e, = struct.unpack('<i', body[:4]); return e, body[4:].split(b'\0')[0].decode(errors='replace')
def shard_batch(s, first, total, fds):
    send(s, 11, struct.pack('<IIII', first, total, len(fds), 0), fds)
def show(r):
    t, b, fds = r
    if t == 5: return 'ERROR %d %s' % err_text(b)
    if t == 2:
        return 'JOB_OK %r fds=%s' % (struct.unpack('<QQQQQ', b[:40]), fds)
    return 'type %s len %d fds %s' % (t, len(b), fds)
