"""Start one local sandbox. Host side, standard library only, run as root and detached
(``setsid --fork python3 -I -S -c BOOT CONFIG REPORT_FD``, BOOT importing this module from a
root-only cached copy, or ``-c SOURCE``) so the sandbox outlives the caller.

It starts on every sandbox's path, so it imports little: no json (its ``re`` and ``enum`` cost
more than the rest of the start-up), no ``signal`` (``enum`` again); ``_socket`` for the
address watcher; ``socket`` and ``threading`` only in the relay for host ports.

CONFIG is one dict, marshalled and in hex (:func:`encode_config`)::

    stage           a folder (0755 on the host) where this launcher's private mounts go
    binds           [{"src", "name", "kind": "dir" | "file"}]: host paths shown at
                    STAGE/NAME, so that the unprivileged bubblewrap can open them even under a
                    0700 folder such as /root
    hangar_uid      the host uid of hangar's tools (uid 0 inside)
    agent_uid       the host uid of the agent (uid 1000 inside)
    bwrap           bubblewrap's argv up to and excluding ``--userns`` and the command
    init            the argv of PID 1 inside; it is given two more: the descriptors to hold
                    (``3,5``) and the one (below 10) to say "r" on once it runs
    hold_fds        descriptors this launcher was given that the sandbox must hold for its life
                    (the uid claim's lock)
    slirp4netns     the slirp4netns binary; the sandbox's own network goes through it
    nft             the nft binary, and ``rules`` the nftables script it loads into the
                    sandbox's network namespace (what the sandbox may reach:
                    :mod:`hangar.sandboxes.local.network`); ``known`` the networks it refuses
                    already (and loopback), ``sets`` {"4", "6"}: the sets an address the host
                    gets later is added to
    host_ports      host loopback ports reachable from the sandbox's own loopback
    timeout         seconds for each step
    volumes         the sandbox's disk: [{"name", "image", "options", "tree"}], each an ext4
                    image to attach to a loop device and mount at STAGE/NAME (nosuid, nodev,
                    ``options``), then ``tree`` made on it (see :func:`make_tree`)

Steps: a private mount namespace with the binds staged and the volumes mounted, the volumes at
once (in this namespace only: the kernel unmounts them, and frees their loop devices, when the
sandbox's last process is gone); a user namespace created meanwhile by a child running as
``hangar_uid``, whose two-line uid and gid maps root writes (``0 -> hangar_uid``,
``1000 -> agent_uid``) and in which nobody can create a further user namespace; bubblewrap run
as ``hangar_uid`` inside it (``--userns``), with its own network, PID, IPC and UTS namespaces;
the packet filter loaded into its network namespace while the init starts, and slirp4netns for
egress with the host's loopback unreachable once the init runs, both done before the report; a
watcher that adds each address the host gets later to the filter; and, for host ports, a relay
that listens on the sandbox's loopback and connects to the host's. The init holds the write end
of a "life" pipe whose read end slirp4netns, the watcher and the relay watch: when the sandbox
ends, so do they.

REPORT_FD gets one JSON line (:func:`answer_line`): ``{"ok": true, "init_pid", "helpers":
[pids]}`` or ``{"ok": false, "error"}``; on failure everything started is killed.
"""

import ctypes
import marshal
import os
import select
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_NOSUID = 2
MS_NODEV = 4
INNER_AGENT = 1000
SIGKILL = 9
AF_INET, AF_INET6 = 2, 10

libc = ctypes.CDLL(None, use_errno=True)


class Failure(Exception):
    pass


def encode_config(cfg):
    """CONFIG as the command line carries it: marshal (data only) in hex."""
    return marshal.dumps(cfg).hex()


def decode_config(text):
    return marshal.loads(bytes.fromhex(text))


def json_text(value):
    """``value`` (str, int, bool, None or a list of them) as JSON, without the json module."""
    if value is True or value is False or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(json_text(v) for v in value) + "]"
    out = []
    for c in str(value):
        code = ord(c)
        if code > 0xFFFF:
            out.append("?")
        elif code < 0x20 or code > 0x7E or c in '"\\':
            out.append("\\u%04x" % code)
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def answer_line(answer):
    """One JSON object of str keys, as a line."""
    return "{" + ", ".join("%s: %s" % (json_text(k), json_text(v))
                           for k, v in answer.items()) + "}\n"


def child_pid(info):
    """The ``child-pid`` of bubblewrap's ``--info-fd`` JSON (a flat object of numbers)."""
    at = info.find(b'"child-pid"')
    if at < 0:
        return None
    rest = info[at + len(b'"child-pid"'):].lstrip()
    if not rest.startswith(b":"):
        return None
    digits = rest[1:].lstrip()
    end = 0
    while end < len(digits) and digits[end:end + 1].isdigit():
        end += 1
    return int(digits[:end]) if end else None


def call(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise Failure("%s: %s" % (what, os.strerror(err)))


def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    call(libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), "mount %s" % dst)


def become(uid):
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def read_within(fd, deadline, what):
    ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    if not ready:
        raise Failure("%s did not happen in time" % what)
    return os.read(fd, 65536)


def stage_binds(cfg):
    """A private mount namespace where each bind source is mounted under the stage folder."""
    call(libc.unshare(CLONE_NEWNS), "unshare(mount)")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    stage = cfg["stage"]
    mount("tmpfs", stage, "tmpfs", 0, "mode=0755")
    for bind in cfg["binds"]:
        target = os.path.join(stage, bind["name"])
        if bind["kind"] == "dir":
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
        mount(bind["src"], target, None, MS_BIND)
    volumes = cfg.get("volumes") or []
    # Each on a thread of its own (``_thread``: ``threading`` costs an import), all at once:
    # attaching and mounting wait on the kernel, without the interpreter's lock. Threads made
    # after the unshare are in this mount namespace too.
    import _thread

    done = []
    for volume in volumes[1:]:
        lock = _thread.allocate_lock()
        lock.acquire()
        failed = []
        _thread.start_new_thread(stage_volume, (stage, volume, lock, failed))
        done.append((lock, failed))
    for volume in volumes[:1]:
        stage_volume(stage, volume, None, [])
    for lock, failed in done:
        lock.acquire()
        if failed:
            raise failed[0]


def stage_volume(stage, volume, lock, failed):
    """Mount ``volume`` at STAGE/NAME and make its tree; as a thread's body, with what it
    raised put in ``failed`` and ``lock`` released at the end."""
    try:
        target = os.path.join(stage, volume["name"])
        os.mkdir(target)
        mount_volume(volume["image"], target, volume["options"])
        make_tree(target, volume["tree"])
    except (Failure, OSError) as exc:
        if lock is None:
            raise
        failed.append(exc)
    finally:
        if lock is not None:
            lock.release()


LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LO_FLAGS_AUTOCLEAR = 4


def mount_volume(image, target, options):
    """Attach ``image`` to a free loop device (autoclear: it is freed with its last user) and
    mount its ext4 at ``target``."""
    import errno
    import fcntl
    import struct

    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        for _ in range(64):  # another launcher may take the free device first: ask again
            number = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
            dev = os.open("/dev/loop%d" % number, os.O_RDWR | os.O_CLOEXEC)
            try:
                backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
                try:
                    # struct loop_config: fd, block_size, struct loop_info64, 8 reserved u64s
                    info = struct.pack("=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0,
                                       LO_FLAGS_AUTOCLEAR, image.encode()[:63], b"", b"", 0, 0)
                    fcntl.ioctl(dev, LOOP_CONFIGURE, struct.pack("=II", backing, 0) + info
                                + bytes(64))
                except OSError as exc:
                    if exc.errno == errno.EBUSY:  # taken meanwhile
                        continue
                    raise Failure("attach the sandbox's disk: %s" % exc) from None
                finally:
                    os.close(backing)
                mount("/dev/loop%d" % number, target, "ext4", MS_NOSUID | MS_NODEV, options)
                return
            finally:
                os.close(dev)  # the mount holds the device now; without one, it is freed
        raise Failure("no free loop device for the sandbox's disk")
    finally:
        os.close(ctl)


def make_tree(base, tree):
    """Make ``tree`` under ``base``, in order: ``{"path", "uid", "mode"}`` is a folder,
    with ``"text"`` a file holding that text."""
    for entry in tree:
        path = os.path.join(base, entry["path"])
        if "text" in entry:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, entry["text"].encode())
            finally:
                os.close(fd)
        else:
            os.mkdir(path)
        os.chown(path, entry["uid"], entry["uid"])
        os.chmod(path, entry["mode"])  # after making it: the umask would mask the bits


def begin_userns(cfg):
    """Start making a user namespace owned by hangar_uid (a child that unshares one and waits
    for its maps) while the caller does other work; :func:`finish_userns` maps both uids."""
    up_r, up_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(up_r)
            os.close(go_w)
            become(cfg["hangar_uid"])
            call(libc.unshare(CLONE_NEWUSER), "unshare(user)")
            os.write(up_w, b"u")
            if os.read(go_r, 1) != b"g":  # the launcher gave up
                os._exit(1)
            # Nested user namespaces would give the agent every capability over namespaces of
            # its own: a wide kernel surface. The limit is this namespace's own.
            with open("/proc/sys/user/max_user_namespaces", "w") as f:
                f.write("0")
            os.write(up_w, b"k")
            os._exit(0)
        except BaseException as exc:  # reported through the pipe's silence and our status
            os.write(2, ("user namespace: %s\n" % exc).encode())
            os._exit(1)
    os.close(up_w)
    os.close(go_r)
    return pid, up_r, go_w


def finish_userns(cfg, begun, deadline):
    """Map both uids in :func:`begin_userns`'s namespace; returns an fd on it. ``cfg`` None:
    only end the child (the launcher failed meanwhile)."""
    pid, up_r, go_w = begun
    try:
        if cfg is None:
            return None
        hangar, agent = cfg["hangar_uid"], cfg["agent_uid"]
        if read_within(up_r, deadline, "the user namespace") != b"u":
            raise Failure("the user namespace could not be made")
        mapping = "0 %d 1\n%d %d 1\n" % (hangar, INNER_AGENT, agent)
        for name in ("uid_map", "gid_map"):
            with open("/proc/%d/%s" % (pid, name), "w") as f:
                f.write(mapping)
        nsfd = os.open("/proc/%d/ns/user" % pid, os.O_RDONLY)
        try:
            os.write(go_w, b"g")
            if read_within(up_r, deadline, "limiting nested user namespaces") != b"k":
                raise Failure("could not limit nested user namespaces")
        except BaseException:
            os.close(nsfd)
            raise
        return nsfd
    finally:
        os.close(up_r)
        os.close(go_w)
        _, status = os.waitpid(pid, 0)


def start_bwrap(cfg, nsfd, life_w, deadline):
    """bubblewrap as hangar_uid in the user namespace; returns (bwrap pid, init host pid, the
    read end the init says "r" on once it runs: :func:`await_init`). Returns as soon as
    bubblewrap has made the namespaces, while the init still starts."""
    info_r, info_w = os.pipe()
    ready_r, ready_w = os.pipe()
    hold = [life_w] + list(cfg["hold_fds"])
    pid = os.fork()
    if pid == 0:
        try:
            # The init's shell says "r" on it: a shell takes one digit for a descriptor.
            ready = next(fd for fd in range(3, 10) if fd not in (nsfd, info_w, *hold))
            if ready != ready_w:
                os.dup2(ready_w, ready)
            os.set_inheritable(ready, True)  # dup2 onto itself would leave it close-on-exec
            # Every other descriptor of ours is close-on-exec: only these reach the sandbox.
            for fd in (nsfd, info_w, *hold):
                os.set_inheritable(fd, True)
            become(cfg["hangar_uid"])
            argv = list(cfg["bwrap"]) + ["--userns", str(nsfd), "--info-fd", str(info_w), "--"]
            argv += list(cfg["init"]) + [",".join(str(fd) for fd in hold), str(ready)]
            os.execv(argv[0], argv)
        except BaseException as exc:
            os.write(2, ("bubblewrap: %s\n" % exc).encode())
            os._exit(127)
    os.close(info_w)
    os.close(ready_w)
    try:
        data = b""
        while True:
            chunk = read_within(info_r, deadline, "bubblewrap's start")
            if not chunk:
                break
            data += chunk
        init_pid = child_pid(data)
        if init_pid is None:
            raise Failure("bubblewrap failed to start the sandbox")
    except BaseException:
        os.close(ready_r)
        raise
    finally:
        os.close(info_r)
    return pid, init_pid, ready_r


def await_init(init_pid, ready_r, deadline):
    """Wait for the init's "r" on ``ready_r`` (then closed); Failure (the init killed) without."""
    try:
        if read_within(ready_r, deadline, "the sandbox's init") != b"r":
            os.kill(init_pid, SIGKILL)
            raise Failure("the sandbox's init did not start")
    finally:
        os.close(ready_r)


def start_slirp(cfg, init_pid, life_r):
    """slirp4netns on the sandbox's network namespace: egress, the host's loopback refused.
    Returns (pid, the read end it says "1" on once the network is up: :func:`await_slirp`)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            argv = [cfg["slirp4netns"], "--configure", "--mtu=65520", "--disable-host-loopback",
                    "--enable-sandbox", "--enable-seccomp",
                    "--userns-path=/proc/%d/ns/user" % init_pid,
                    "--ready-fd", str(ready_w), "--exit-fd", str(life_r), str(init_pid), "tap0"]
            os.set_inheritable(ready_w, True)
            os.set_inheritable(life_r, True)
            os.execv(argv[0], argv)
        except BaseException as exc:
            os.write(2, ("slirp4netns: %s\n" % exc).encode())
            os._exit(127)
    os.close(ready_w)
    return pid, ready_r


def await_slirp(ready_r, deadline):
    try:
        if read_within(ready_r, deadline, "the sandbox's network") != b"1":
            raise Failure("slirp4netns could not configure the sandbox's network")
    finally:
        os.close(ready_r)


def start_nft(cfg, netns, script):
    """``nft -f`` run in the network namespace ``netns`` (a descriptor: the sandbox's), reading
    ``script`` from a pipe; returns (pid, pidfd, stderr's read end) for :func:`finish_nft`."""
    in_r, in_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            call(libc.setns(netns, CLONE_NEWNET), "setns(sandbox network)")
            os.dup2(in_r, 0)
            os.dup2(err_w, 2)
            os.execv(cfg["nft"], [cfg["nft"], "-f", "/dev/stdin"])
        except BaseException as exc:
            os.write(2, ("nft: %s\n" % exc).encode())
            os._exit(127)
    os.close(in_r)
    os.close(err_w)
    with open(in_w, "wb") as pipe:  # nft reads all of it before it answers
        pipe.write(script.encode())
    return pid, os.pidfd_open(pid), err_r


def finish_nft(started, deadline):
    """Wait for :func:`start_nft`'s nft; Failure with what it said unless it succeeded."""
    pid, pidfd, err_r = started
    try:
        if not select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            os.kill(pid, SIGKILL)
            os.waitpid(pid, 0)
            raise Failure("the sandbox's network rules were not loaded in time")
        _, status = os.waitpid(pid, 0)
        said = os.read(err_r, 4096).decode(errors="replace").strip()
        if status != 0:
            raise Failure("the sandbox's network rules could not be loaded: %s" % (said or status))
    finally:
        os.close(pidfd)
        os.close(err_r)


RTMGRP_IPV4_IFADDR = 0x10
RTMGRP_IPV6_IFADDR = 0x100
RTM_NEWADDR = 20
RTM_GETADDR = 22
NLM_F_REQUEST_DUMP = 0x301
IFA_ADDRESS = 1
IFA_LOCAL = 2
IFA_BROADCAST = 4


def await_started(r, what):
    """Wait for a forked helper's "r" on ``r`` (then closed): Failure naming ``what`` when it
    ended without saying it started."""
    try:
        if os.read(r, 1) != b"r":
            raise Failure("%s did not start" % what)
    finally:
        os.close(r)


def start_watcher(cfg, init_pid, life_r, report):
    """A process in the host's network namespace (root: it enters the sandbox's to run nft)
    that follows the host's addresses: one the host gets after the rules were written is added
    to the rules' sets within milliseconds. It first asks for every address, which covers
    those the host got while the sandbox started. Through ``_socket``: ``socket`` imports
    ``enum``, which would take 8 ms of the start."""
    import _socket

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(report)  # forked, not executed: the caller must see the report end
            os.setsid()
            # Held from now on: a pid reused after the sandbox ends never names another's.
            netns = os.open("/proc/%d/ns/net" % init_pid, os.O_RDONLY)
            news = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, _socket.NETLINK_ROUTE)
            news.bind((0, RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR))
            ask_addresses(news)
            os.write(w, b"r")
            os.close(w)
            watch_forever(cfg, netns, news, life_r)
        except BaseException as exc:
            os.write(2, ("address watcher: %s\n" % exc).encode())
        os._exit(0)
    os.close(w)
    await_started(r, "the host address watcher")
    return pid


def ask_addresses(news):
    """A dump of every address, answered on ``news`` like the news themselves."""
    import struct

    news.send(struct.pack("=IHHII", 24, RTM_GETADDR, NLM_F_REQUEST_DUMP, 1, 0) + bytes(8))


def watch_forever(cfg, netns, news, life_r):
    import ipaddress  # here, off the start's path

    known = [ipaddress.ip_network(n) for n in cfg["known"]]
    while True:
        ready, _, _ = select.select([life_r, news], [], [])
        if life_r in ready:
            os._exit(0)  # the sandbox is gone
        try:
            data = news.recv(1 << 20)
        except OSError:  # news were lost (ENOBUFS): ask for all of them again
            ask_addresses(news)
            continue
        fresh = []
        for text in addresses_in(data):
            address = ipaddress.ip_address(text)
            if not any(address in net for net in known) and address not in fresh:
                fresh.append(address)
        if not fresh:
            continue
        script = ""
        for version in (4, 6):
            these = [str(a) for a in fresh if a.version == version]
            if these:
                script += "add element %s { %s }\n" % (cfg["sets"][str(version)],
                                                        ", ".join(these))
        try:
            finish_nft(start_nft(cfg, netns, script), time.monotonic() + 10)
            known += [ipaddress.ip_network(a) for a in fresh]
        except (Failure, OSError) as exc:
            os.write(2, ("address watcher: %s\n" % exc).encode())


def addresses_in(data):
    """The host's own addresses that RTM_NEWADDR messages in ``data`` announce: IPv4 local and
    broadcast addresses, IPv6 local ones (IFA_ADDRESS is the peer on a point-to-point link)."""
    import _socket
    import struct

    at = 0
    while at + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, at)
        if length < 16:
            return
        if kind == RTM_NEWADDR and length >= 24:
            family = data[at + 16]
            attrs = {}
            attr = at + 24
            while attr + 4 <= at + length:
                size, name = struct.unpack_from("=HH", data, attr)
                if size < 4:
                    break
                attrs[name] = data[attr + 4 : attr + size]
                attr += (size + 3) & ~3
            width = {AF_INET: 4, AF_INET6: 16}.get(family)
            local = attrs.get(IFA_LOCAL, attrs.get(IFA_ADDRESS))
            for raw in (local, attrs.get(IFA_BROADCAST) if family == AF_INET else None):
                if raw is not None and len(raw) == width:
                    yield _socket.inet_ntop(family, raw)
        at += (length + 3) & ~3


def start_relay(cfg, init_pid, life_r, report):
    """A process in the host's network namespace that holds listeners made in the sandbox's:
    a connection to the sandbox's 127.0.0.1:PORT is relayed to the host's 127.0.0.1:PORT."""
    import socket
    import threading  # noqa: F401  # before root is dropped: relay_forever uses it

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.close(report)  # forked, not executed: the caller must see the report end
            os.setsid()
            own = os.open("/proc/self/ns/net", os.O_RDONLY)
            theirs = os.open("/proc/%d/ns/net" % init_pid, os.O_RDONLY)
            call(libc.setns(theirs, CLONE_NEWNET), "setns(sandbox network)")
            listeners = []
            for port in cfg["host_ports"]:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(64)
                listeners.append((sock, port))
            call(libc.setns(own, CLONE_NEWNET), "setns(host network)")
            os.close(own)
            os.close(theirs)
            become(cfg["hangar_uid"])
            os.write(w, b"r")
            os.close(w)
            relay_forever(listeners, life_r)
        except BaseException as exc:
            os.write(2, ("relay: %s\n" % exc).encode())
        os._exit(0)
    os.close(w)
    await_started(r, "the host-port relay")
    return pid


def relay_forever(listeners, life_r):
    import threading

    by_fd = {sock.fileno(): (sock, port) for sock, port in listeners}
    while True:
        ready, _, _ = select.select([life_r, *by_fd], [], [])
        if life_r in ready:
            os._exit(0)  # the sandbox is gone
        for fd in ready:
            sock, port = by_fd[fd]
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=pipe_both, args=(conn, port), daemon=True).start()


def pipe_both(inner, port):
    import socket

    # A numeric address and no name lookup: this process has dropped root and may no longer
    # read the modules a lookup would import.
    outer = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        outer.settimeout(10)
        outer.connect(("127.0.0.1", port))
        outer.settimeout(None)
    except OSError:
        inner.close()
        outer.close()
        return
    pair = {inner: outer, outer: inner}
    try:
        while pair:
            ready, _, _ = select.select(list(pair), [], [])
            for src in ready:
                data = src.recv(65536)
                dst = pair.get(src)
                if dst is None:
                    continue
                if data:
                    dst.sendall(data)
                else:  # one side finished sending: pass the end on, keep reading the other
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    del pair[src]
    except OSError:
        pass
    finally:
        inner.close()
        outer.close()


def main():
    cfg = decode_config(sys.argv[1])
    report = int(sys.argv[2])
    os.set_inheritable(report, False)
    deadline = time.monotonic() + cfg["timeout"]
    started = []
    try:
        begun = begin_userns(cfg)
        try:
            stage_binds(cfg)
        except BaseException:
            finish_userns(None, begun, deadline)
            raise
        nsfd = finish_userns(cfg, begun, deadline)
        life_r, life_w = os.pipe()
        bwrap_pid, init_pid, init_ready = start_bwrap(cfg, nsfd, life_w, deadline)
        started.append(init_pid)
        os.close(life_w)
        os.close(nsfd)
        for fd in cfg["hold_fds"]:
            os.close(fd)
        # The network namespace exists once bubblewrap names the init: its rules load while
        # the init starts. slirp4netns waits for the init: it configures its device over
        # netlink in that namespace, and bubblewrap, setting up the loopback device there
        # meanwhile, failed ("loopback: Failed RTM_NEWADDR") when the two met.
        try:
            netns = os.open("/proc/%d/ns/net" % init_pid, os.O_RDONLY)
            try:
                rules = start_nft(cfg, netns, cfg["rules"])
            finally:
                os.close(netns)
        except BaseException:
            os.close(init_ready)
            raise
        try:
            await_init(init_pid, init_ready, deadline)
            slirp, slirp_ready = start_slirp(cfg, init_pid, life_r)
            helpers = [slirp]
            started.append(slirp)
            await_slirp(slirp_ready, deadline)
        finally:
            finish_nft(rules, deadline)
        helpers.append(start_watcher(cfg, init_pid, life_r, report))
        started.append(helpers[-1])
        if cfg["host_ports"]:
            helpers.append(start_relay(cfg, init_pid, life_r, report))
            started.append(helpers[-1])
        os.close(life_r)
        # bubblewrap's own process too: with it gone, nothing holds the uid claim or the
        # sandbox's disk any more, so a destroy that waited for it has freed both.
        answer = {"ok": True, "init_pid": init_pid, "helpers": helpers + [bwrap_pid]}
    except (Failure, OSError) as exc:
        for pid in started:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
        answer = {"ok": False, "error": str(exc)}
    try:
        os.write(report, answer_line(answer).encode())
    except OSError:  # the caller gave up waiting: nobody will know this sandbox, so end it
        for pid in started:
            try:
                os.kill(pid, SIGKILL)
            except OSError:
                pass
    os.close(report)


if __name__ == "__main__":
    main()
