"""Which external net plugin NCCL would load in a process with this environment and file tree.

nodecheck's ``nccl_ofi_plugin`` check asks this instead of "is there any libnccl-net*.so
somewhere": NCCL loads only the library its rule names, and only where dlopen looks, so a plugin
on disk that NCCL never opens leaves it on its internal IB/socket transports (TCP on EFA).

NCCL's rule (NVIDIA/nccl@86fa684):
- src/misc/param.cc ``initEnvFunc``/``setEnvFile``: the process environment wins; NCCL then sets
  (never overwrites) variables from ``$NCCL_CONF_FILE`` (when set and not empty) or else
  ``$HOME/.nccl.conf``, then from ``/etc/nccl.conf``. Lines are ``NAME=value``, ``#`` starts a
  comment line, nothing is trimmed;
- src/plugin/net.cc ``initPluginLibsOnceFunc``: NCCL_NET_PLUGIN unset -> ``libnccl-net.so``;
  ``none`` (any case) -> no external plugin; otherwise a comma-separated list (empty items dropped,
  names of 255+ characters ignored, at most 14), tried in order;
- src/plugin/plugin_open.cc ``openPluginLib``: each name X is first dlopen'ed as given; if that
  fails and X has no ``/`` and is not already ``lib*.so``, as ``libnccl-net-X.so``.

dlopen's search for a name without ``/`` (glibc ld.so(8); Debian's ld.so prints the same order with
``--help``): LD_LIBRARY_PATH (``:`` or ``;`` separated, an empty item is the working directory, an
empty variable adds nothing), then /etc/ld.so.cache, then the system directories. A name with a
``/`` is opened as that path (relative to the working directory).

Not modelled (each can only make NCCL find a plugin this says it would not, or the reverse in the
last two cases): the DT_RPATH/DT_RUNPATH of libnccl.so and of the executable (which libnccl torch
loads is not known here; the kit puts the plugin directory on LD_LIBRARY_PATH instead); the
glibc-hwcaps subdirectories; ``$ORIGIN``-style tokens in LD_LIBRARY_PATH; an object already loaded
under that SONAME; an external env plugin (NCCL_ENV_PLUGIN) that answers NCCL_NET_PLUGIN itself;
names that are a prefix of ``STATIC_PLUGIN`` (NCCL opens the program itself: counted as not found);
and whether the file found is a loadable ELF object of this architecture exporting ``ncclNet_v*``
(a file of that name counts; NCCL would skip a wrong one and move on).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

NET_PREFIX = "libnccl-net"  # plugin_open.cc pluginPrefix[NET]
DEFAULT_LIBRARY = "libnccl-net.so"  # net.cc defaultNetPlugin
MAX_EXTERNAL = 16 - 2  # NCCL_NET_MAX_PLUGINS (nccl_net.h) less the internal IB and socket plugins
MAX_NAME = 255  # net.cc: a list item needs strlen + 1 <= MAX_STR_LEN
CONF_FILE = "/etc/nccl.conf"

# ld.so's system search path after the cache: Debian/Ubuntu's multiarch directories (the trainer
# image is Ubuntu; `ld.so --help` lists them), then the generic ones, then the 64-bit ones that
# Fedora-family glibc uses (harmless where they are empty).
SYSTEM_DIRS = tuple(f"{d}/{os.uname().machine}-linux-gnu" for d in ("/lib", "/usr/lib")) + (
    "/lib", "/usr/lib", "/lib64", "/usr/lib64")

# glibc sysdeps/generic/dl-cache.h: the "new" cache format, which ldconfig has written alone since
# glibc 2.32 (older caches put it after an "ld.so-1.7.0" table). String offsets are from the start
# of the new header.
CACHE_MAGIC = b"glibc-ld.so.cache1.1"
CACHE_HEADER = struct.Struct("<20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, extension
CACHE_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion, hwcap
OLD_MAGIC = b"ld.so-1.7.0"


@dataclass(frozen=True)
class PluginResolution:
    setting: str  # "NCCL_NET_PLUGIN=ofi (environment)", "NCCL_NET_PLUGIN unset", ...
    tried: tuple[str, ...]  # what NCCL asks dlopen for, in order
    path: str | None  # the first one dlopen finds, or None: NCCL uses its internal transports


def conf_value(text: str, name: str) -> str | None:
    """``name``'s value in an nccl.conf text, as setEnvFile reads it (the first line wins)."""
    for line in text.split("\n"):
        line = line[:-1] if line.endswith("\r") else line
        if line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        if key == name:
            return value
    return None


def net_plugin_setting(env: dict[str, str], read) -> tuple[str | None, str]:
    """(NCCL_NET_PLUGIN as NCCL sees it, where it came from); ``read(path)`` gives a file's text or None."""
    if "NCCL_NET_PLUGIN" in env:
        return env["NCCL_NET_PLUGIN"], "environment"
    conf = env.get("NCCL_CONF_FILE") or (f"{env['HOME']}/.nccl.conf" if "HOME" in env else None)
    for path in (conf, CONF_FILE):
        value = conf_value(read(path) or "", "NCCL_NET_PLUGIN") if path else None
        if value is not None:
            return value, path
    return None, "unset"


def library_names(value: str | None) -> list[str]:
    """The names NCCL hands dlopen, in order, for this NCCL_NET_PLUGIN value (None: unset)."""
    if value is None:
        return [DEFAULT_LIBRARY]
    if value.lower() == "none":
        return []
    items = [n for n in value.split(",") if n and len(n) + 1 <= MAX_NAME][:MAX_EXTERNAL]
    names = []
    for item in items:
        if "static_plugin".startswith(item.lower()):
            continue  # dlopen(NULL): the program itself, not modelled
        names.append(item)
        if "/" not in item and not (item.startswith("lib") and item.endswith(".so")):
            names.append(f"{NET_PREFIX}-{item}.so")
    return names


def read_ld_cache(data: bytes) -> dict[str, str]:
    """Library name -> path from an /etc/ld.so.cache image (empty when unreadable)."""
    start = data.find(CACHE_MAGIC) if data.startswith(OLD_MAGIC) else 0
    if start < 0 or not data.startswith(CACHE_MAGIC, start) or len(data) < start + CACHE_HEADER.size:
        return {}
    _, nlibs, _, _, _ = CACHE_HEADER.unpack_from(data, start)

    def string(offset: int) -> str:
        end = data.find(b"\0", start + offset)
        return data[start + offset:end].decode(errors="replace") if end >= 0 else ""

    found: dict[str, str] = {}
    for i in range(nlibs):
        at = start + CACHE_HEADER.size + i * CACHE_ENTRY.size
        if at + CACHE_ENTRY.size > len(data):
            break
        _, key, value, _, _ = CACHE_ENTRY.unpack_from(data, at)
        found.setdefault(string(key), string(value))
    return found


def ld_library_dirs(value: str, cwd: str) -> list[str]:
    if not value:
        return []
    return [item or cwd for item in value.replace(";", ":").split(":")]


def resolve(root: Path, env: dict[str, str], cwd: str | None = None) -> PluginResolution:
    """Where NCCL would find its net plugin, reading files under ``root`` (``/`` in a pod)."""
    cwd = cwd or os.getcwd()

    def under(path: str) -> Path:
        return root / os.path.join(cwd, path).lstrip("/")

    def read(path: str) -> str | None:
        try:
            return under(path).read_text(errors="replace")
        except OSError:
            return None

    value, source = net_plugin_setting(env, read)
    setting = "NCCL_NET_PLUGIN unset" if value is None else f"NCCL_NET_PLUGIN={value} ({source})"
    names = library_names(value)
    cache = None
    for name in names:
        if "/" in name:
            if under(name).is_file():
                return PluginResolution(setting, tuple(names), os.path.normpath(os.path.join(cwd, name)))
            continue
        for d in ld_library_dirs(env.get("LD_LIBRARY_PATH", ""), cwd):
            if under(os.path.join(d, name)).is_file():
                return PluginResolution(setting, tuple(names), os.path.normpath(os.path.join(cwd, d, name)))
        if cache is None:
            try:
                cache = read_ld_cache(under("/etc/ld.so.cache").read_bytes())
            except OSError:
                cache = {}
        if name in cache and under(cache[name]).is_file():
            return PluginResolution(setting, tuple(names), cache[name])
        for d in SYSTEM_DIRS:
            if under(os.path.join(d, name)).is_file():
                return PluginResolution(setting, tuple(names), os.path.join(d, name))
    return PluginResolution(setting, tuple(names), None)
