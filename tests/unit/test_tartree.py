import io
import tarfile

import pytest

from niclab.plumbing.image.tartree import TarTree


def make_tar(path):
    with tarfile.open(path, "w") as tar:

        def add(name, kind, data=b"", link=""):
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data) if data else None)

        add("./", tarfile.DIRTYPE)
        add("./usr", tarfile.DIRTYPE)
        add("./usr/bin", tarfile.DIRTYPE)
        add("./usr/lib", tarfile.DIRTYPE)
        add("./bin", tarfile.SYMTYPE, link="usr/bin")
        add("./lib", tarfile.SYMTYPE, link="usr/lib")
        add("./usr/bin/ip", tarfile.REGTYPE, b"ELF-ip")
        add("./usr/sbin", tarfile.DIRTYPE)
        add("./usr/sbin/ip", tarfile.SYMTYPE, link="/bin/ip")
        add("./usr/lib/libc.so.6", tarfile.REGTYPE, b"libc")
        add("./usr/bin/ip-hard", tarfile.LNKTYPE, link="./usr/bin/ip")


def test_resolves_symlinks_through_merged_usr(tmp_path):
    make_tar(tmp_path / "root.tar")
    with TarTree(tmp_path / "root.tar") as root:
        assert root.resolve("/usr/sbin/ip") == "/usr/bin/ip"
        assert root.read("/lib/libc.so.6") == b"libc"
        assert root.read("/bin/ip-hard") == b"ELF-ip"
        assert root.exists("/bin/ip")
        assert not root.exists("/bin/tc")
        assert root.listdir("/usr/bin") == ["ip", "ip-hard"]
        with pytest.raises(FileNotFoundError):
            root.read("/usr/bin")
