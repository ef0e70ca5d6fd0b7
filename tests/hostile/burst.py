# burst.py SOCKET MANIFEST K GO: hold K connections, each with the whole set of MANIFEST's shards
# sent (CTL_SHARD_FDS, one batch of at most 64) and no job open; when the file GO exists, send
# every job open at once and print the answers, counted.
import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ldproto import *
S, man, K, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
d = os.path.dirname(man)
paths = [os.path.join(d, l.split(' ', 2)[2]) for l in open(man).read().split('\n')[1:-2]]
conns = []
for i in range(K):
    s = connect(S)
    fds = [os.open(p, os.O_RDONLY) for p in paths]
    shard_batch(s, 0, len(fds), fds)
    for f in fds:
        os.close(f)
    r = recv(s)
    if r[0] != 12:
        print(os.getuid(), 'batch', show(r)); s.close(); break
    conns.append(s)
print(os.getuid(), 'holding', len(conns), 'sets of', len(paths), flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
m = os.open(man, os.O_RDONLY)
for i, s in enumerate(conns):
    send(s, 1, job_open(job=b'b%d' % i, dataset=man.encode()), [m])
res = {}
for s in conns:
    try:
        k = show(recv(s, 30))[:70]
    except Exception as e:
        k = repr(e)
    k = 'JOB_OK' if k.startswith('JOB_OK') else k
    res[k] = res.get(k, 0) + 1
print(os.getuid(), res, flush=True)
time.sleep(1)
