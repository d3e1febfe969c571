"""Server of the spawn tests: accepts one connection on ADDR:PORT, starts CHILD (spawn_child.py)
with the connection's fd through MODE (posix_spawn, posix_spawnp, system), waits for it, then
writes "parent" and closes. Prints "listening" once listening and one JSON line at the end."""
import json
import os
import socket
import sys

mode, addr, port, child = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((addr, port))
ls.listen(4)
print("listening", flush=True)
conn, _ = ls.accept()
fd = conn.fileno()
os.set_inheritable(fd, True)        # Python's sockets are close-on-exec (PEP 446)
py = sys.executable
if mode == "posix_spawn":
    pid = os.posix_spawn(py, [py, child, str(fd), "child"], os.environ)
    status = os.waitpid(pid, 0)[1]
elif mode == "posix_spawnp":
    pid = os.posix_spawnp(os.path.basename(py), [py, child, str(fd), "child"], os.environ)
    status = os.waitpid(pid, 0)[1]
elif mode == "system":
    # os.system is glibc's system(); `exec` so that the shell becomes the child (a shell that
    # forked and exited would keep its copy of the fd counted, see docs/COMPLIANCE.md).
    status = os.system(f"exec {py} {child} {fd} child")
elif mode == "popen":
    # glibc's popen/pclose through ctypes (Python's os.popen is subprocess, not libc's popen);
    # the command also prints to the pipe, which the parent reads before pclose.
    import ctypes
    libc = ctypes.CDLL(None)
    libc.popen.restype = ctypes.c_void_p
    libc.popen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.pclose.argtypes = [ctypes.c_void_p]
    libc.fread.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p]
    f = libc.popen(f"{py} {child} {fd} child; echo piped".encode(), b"r")
    if not f:
        sys.exit("popen failed")
    buf = ctypes.create_string_buffer(256)
    n = libc.fread(buf, 1, 255, f)
    status = libc.pclose(f)
    if buf.raw[:n] != b"piped\n":
        sys.exit(f"popen: read {buf.raw[:n]!r} from the pipe")
else:
    sys.exit(f"unknown mode {mode}")
code = os.waitstatus_to_exitcode(status)
conn.sendall(b"parent\n")
conn.close()
ls.close()
print(json.dumps({"mode": mode, "child_exit": code}), flush=True)
sys.exit(0 if code == 0 else 4)
