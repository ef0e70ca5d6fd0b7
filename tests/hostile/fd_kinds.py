# fd_kinds.py SOCKET: a job open with each kind of descriptor (pipe, socket, directory, O_PATH of
# /etc/shadow, write-only, memfd, sealed memfd, eventfd, /proc files, /dev/null, a pty, a sparse
# file, O_APPEND); prints each answer. Paths under /tmp/hrdata and /tmp/hrB are made by hand.
import os, sys, socket, fcntl, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ldproto import *
S=sys.argv[1]  # the socket
def try_fd(name, fd, ds=b'/tmp/hrdata/d.dpk', **kw):
    s = connect(S)
    send(s, 1, job_open(job=b'fd'+str(os.getpid()).encode()+name.encode()[:20].replace(b' ',b'_').replace(b'/',b'_'), dataset=ds, **kw), [fd] if fd is not None else [])
    try: r = show(recv(s))
    except Exception as e: r = 'EXC %r' % e
    print('%-28s -> %s' % (name, r)); s.close()
try_fd('regular', os.open('/tmp/hrdata/d.dpk', os.O_RDONLY))
try_fd('none', None)
r,w = os.pipe(); try_fd('pipe', r)
a,b = socket.socketpair(); try_fd('socket', a.fileno())
try_fd('dir', os.open('/tmp/hrdata', os.O_RDONLY))
try_fd('O_PATH A-private?', os.open('/tmp/hrdata/d.dpk', os.O_PATH))
try_fd('O_PATH /etc/shadow', os.open('/etc/shadow', os.O_PATH))
try_fd('O_WRONLY own', os.open('/tmp/hrB/w.dpk', os.O_WRONLY))
try_fd('memfd', os.memfd_create('x'))
m = os.memfd_create('y', os.MFD_ALLOW_SEALING); os.write(m, open('/tmp/hrdata/d.dpk','rb').read())
fcntl.fcntl(m, 1033, 0xf)  # F_ADD_SEALS all
try_fd('memfd sealed dpk', m)
try_fd('eventfd', os.eventfd(0))
try_fd('/proc/self/status', os.open('/proc/self/status', os.O_RDONLY))
try_fd('/proc/self/mem', os.open('/proc/self/mem', os.O_RDONLY))
try_fd('/dev/null', os.open('/dev/null', os.O_RDONLY))
mp, sp = os.openpty(); try_fd('pty', sp)
try_fd('sparse', os.open('/tmp/hrB/sparse.dpk', os.O_RDONLY))
try_fd('O_APPEND rw', os.open('/tmp/hrB/w.dpk', os.O_RDWR|os.O_APPEND))
