"""What scripts/gpu-run-2gpu.sh's helpers read from the machine: a process's
channel groups through the RM ABI (GET_TIMESLICE on duplicates of its
/dev/nvidiactl descriptors), gpreemptctl ps, gpreemptd's unix socket and
NVML's process lists (nvidia-smi). Imported by twogpu.py's subcommands.
"""

import ctypes
import fcntl
import json
import os
import socket
import struct
import subprocess
import time

# --- RM ABI, as ioctl/ spells it ---------------------------------------------
# _IOWR('F', NV_ESC_RM_CONTROL, NVOS54_PARAMETERS): NVOS54 is 32 bytes
# (hClient, hObject, cmd, flags: u32; params: NvP64; paramsSize, status: u32).
NV_ESC_RM_CONTROL = 0x2A
NVOS54_SIZE = 32
RM_CONTROL_REQ = (3 << 30) | (NVOS54_SIZE << 16) | (ord("F") << 8) | NV_ESC_RM_CONTROL
NVA06C_CTRL_CMD_GET_TIMESLICE = 0xA06C0104
SYS_PIDFD_GETFD = 438  # the same number on x86-64 and arm64

libc = ctypes.CDLL(None, use_errno=True)


def mono_ns():
    return time.monotonic_ns()


def pidfd_getfd(pidfd, fd):
    r = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"pidfd_getfd fd {fd}: {os.strerror(e)}")
    return r


class GroupReader:
    """GET_TIMESLICE on a process's channel groups through duplicates of its
    /dev/nvidiactl descriptors (what gpreemptctl's attach source does), one
    8 us control a group instead of a 30-80 ms discovery a read."""

    def __init__(self, pid):
        self.pid = pid
        self.pidfd = os.pidfd_open(pid)
        self.fds = {}  # the target's fd -> ours
        self.groups = {}  # handle -> (target fd, client, engine)
        self.param = ctypes.create_string_buffer(8)

    def add(self, fd, client, handle, engine=""):
        if handle in self.groups:
            if engine and not self.groups[handle][2]:
                self.groups[handle] = (fd, client, engine)
            return False
        if fd not in self.fds:
            self.fds[fd] = pidfd_getfd(self.pidfd, fd)
        self.groups[handle] = (fd, client, engine)
        return True

    def read(self):
        """Each group's timeslice in us, or an error string."""
        out = {}
        for handle, (fd, client, _) in self.groups.items():
            ctypes.memset(self.param, 0, 8)
            blk = bytearray(struct.pack("<IIIIQII", client, handle, NVA06C_CTRL_CMD_GET_TIMESLICE, 0,
                                        ctypes.addressof(self.param), 8, 0))
            try:
                fcntl.ioctl(self.fds[fd], RM_CONTROL_REQ, blk, True)
            except OSError as e:
                out[hex(handle)] = f"errno {e.errno}"
                continue
            status = struct.unpack_from("<I", blk, 28)[0]
            if status != 0:
                out[hex(handle)] = f"NV_STATUS {status:#x}"
            else:
                out[hex(handle)] = struct.unpack("<Q", self.param.raw)[0]
        return out

    def close(self):
        for f in self.fds.values():
            try:
                os.close(f)
            except OSError:
                pass
        self.fds.clear()
        try:
            os.close(self.pidfd)
        except OSError:
            pass


def handle(v):
    return v if isinstance(v, int) else int(str(v), 0)


def ps_groups(ctl, pid, timeout=5):
    """gpreemptctl -o json ps --pid's groups, or None."""
    try:
        r = subprocess.run([ctl, "-o", "json", "ps", "--pid", str(pid)], capture_output=True, text=True, timeout=timeout)
        d = json.loads(r.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return None
    d = d[0] if isinstance(d, list) and d else d
    return d.get("groups") if isinstance(d, dict) else None


def unix_get(sock, path, timeout=5):
    """GET path from gpreemptd's unix socket: the body, or None."""
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        s.connect(sock)
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: d\r\n\r\n".encode())
        buf = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            buf += c
        s.close()
    except OSError:
        return None
    head, _, body = buf.partition(b"\r\n\r\n")
    return body.decode(errors="replace") if head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0] + b" " else None


def nvml_gpus():
    """pid -> sorted physical GPU indices, from nvidia-smi (NVML)."""
    try:
        ix = {}
        for line in subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=20).stdout.splitlines():
            i, u = [x.strip() for x in line.split(",", 1)]
            ix[u] = int(i)
        out = {}
        for line in subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                                   capture_output=True, text=True, timeout=20).stdout.splitlines():
            p, u = [x.strip() for x in line.split(",", 1)]
            out.setdefault(int(p), set()).add(ix.get(u, u))
        return {p: sorted(v, key=str) for p, v in out.items()}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
