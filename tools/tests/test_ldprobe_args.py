"""ldprobe's command line (tools/ldprobe.py: make_parser, the argparse table, and check_usage, the
rules between options): every ranged option taken exactly at its bounds and refused one past them
with exit 2 and a message naming the option, the value and the range; --help shows every option
with its default; the rules between options refuse what they say, naming the option. Nothing is
started: parse_options does not look for the programs. Run through tests/it_ldprobe_py.sh."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/
import ldprobe  # noqa: E402

# option, attribute, lowest, highest, one below, one above (as typed), what the error says
RANGED = [
    ("--crop", "crop", "1", "8192", "0", "8193", "1..8192"),
    ("--batch", "batch", "1", "65536", "0", "65537", "1..65536"),
    ("--ranks", "ranks", "1", "4096", "0", "4097", "1..4096"),
    ("--workers", "workers", "1", "1024", "0", "1025", "1..1024"),
    ("--slots", "slots", "2", "1024", "1", "1025", "2..1024"),
    ("--prefetch", "prefetch", "1", str(ldprobe.PREFETCH_MAX), "0",
     str(ldprobe.PREFETCH_MAX + 1), "1..%d" % ldprobe.PREFETCH_MAX),
    ("--seed", "seed", "0", str(2**62), "-1", str(2**62 + 1), "0..%d" % 2**62),
    ("--seconds", "seconds", "0.5", "3600", "0.4999", "3600.001", "0.5..3600"),
    ("--timeout", "timeout", "10", "86400", "9.999", "86400.01", "10..86400"),
]


@pytest.fixture
def dataset(tmp_path):
    p = tmp_path / "d.dpk"
    p.write_bytes(b"")
    return str(p)


def refused(capsys, argv, says):
    """parse_options(@argv) exits 2 and its message has @says."""
    with pytest.raises(SystemExit) as e:
        ldprobe.parse_options(argv, ncpu=4)
    err = capsys.readouterr().err
    assert e.value.code == ldprobe.EXIT_USAGE, err
    assert says in err, err
    return err


@pytest.mark.parametrize("opt,attr,lo,hi,below,above,rng", RANGED, ids=[r[0] for r in RANGED])
def test_ldprobe_ranged_option_at_bounds(capsys, dataset, opt, attr, lo, hi, below, above, rng):
    conv = None
    for v in (lo, hi):
        got = getattr(ldprobe.parse_options(["--dataset", dataset, opt, v], ncpu=4), attr)
        conv = type(got)   # the row's kind: int or float
        assert got == conv(v)
    for v in (below, above):
        refused(capsys, ["--dataset", dataset, opt + "=" + v],
                "argument %s: %s is not in %s" % (opt, conv(v) if conv is int else "%g" % float(v),
                                                  rng))
    refused(capsys, ["--dataset", dataset, opt, "x"], "argument %s: 'x' is not" % opt)


@pytest.mark.parametrize("opt,choices", [("--io", ("auto", "buffered", "pread")),
                                         ("--device", ("cuda", "host"))])
def test_ldprobe_choice_options(capsys, dataset, opt, choices):
    for c in choices:
        a = ldprobe.parse_options(["--dataset", dataset, opt, c], ncpu=4)
        assert getattr(a, opt[2:]) == c
    refused(capsys, ["--dataset", dataset, opt, choices[0].upper()],
            "argument %s: invalid choice: '%s'" % (opt, choices[0].upper()))


def test_ldprobe_defaults(dataset):
    a = ldprobe.parse_options(["--dataset", dataset], ncpu=3)
    assert (a.model, a.crop, a.batch, a.ranks, a.workers, a.seconds, a.seed) == \
        ("mlp", 224, 64, 1, 3, 5.0, 1)
    assert (a.out, a.launch_agent, a.timeout, a.socket, a.io) == \
        ("ldprobe-report", "ssh", 120.0, None, None)
    assert ldprobe.parse_options(["--dataset", dataset, "--seconds", "10"], ncpu=3).timeout == 200


def test_ldprobe_help_lists_every_option_with_its_default():
    p = ldprobe.make_parser(4)
    text = p.format_help()
    rows = [x for x in p._actions if x.help != ldprobe.argparse.SUPPRESS and x.dest != "help"]
    assert len(rows) >= 20
    for x in rows:
        name = x.option_strings[-1]
        assert name in text
        assert "default" in x.help or x.required, "%s: --help gives no default" % name
    assert "default: all cores, here 4" in " ".join(text.split())


@pytest.mark.parametrize("extra,says", [
    (["--socket", "/nonexistent.sock", "--workers", "2"], "--workers and --io configure"),
    (["--socket", "/nonexistent.sock", "--io", "pread"], "--workers and --io configure"),
    (["--socket", "/nonexistent.sock"], "--socket /nonexistent.sock: no such socket"),
    (["--hostfile", "/nonexistent"], "--hostfile: give --socket"),
    (["--node-ceiling", "1"], "--node-ceiling 1: give FIRST:COUNT"),
    (["--node-ceiling", "1:2"], "--node-ceiling 1:2: needs --socket"),
    (["--trainer-args", "'unclosed"], "--trainer-args:"),
], ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_ldprobe_rules_between_options(capsys, dataset, extra, says):
    refused(capsys, ["--dataset", dataset] + extra, says)


def test_ldprobe_missing_dataset_named(capsys, tmp_path):
    refused(capsys, ["--dataset", str(tmp_path / "none.dpk")], "none.dpk: no such file")
    refused(capsys, [], "the following arguments are required: --dataset")


def test_ldprobe_node_ceiling_bounds(tmp_path, dataset, capsys):
    sock = tmp_path / "s.sock"
    sock.write_bytes(b"")   # only its existence is checked here
    base = ["--dataset", dataset, "--socket", str(sock), "--ranks", "4"]
    a = ldprobe.parse_options(base + ["--node-ceiling", "2:2"], ncpu=4)
    assert a.node_ranks == range(2, 4)   # the last rank exactly
    refused(capsys, base + ["--node-ceiling", "3:2"], "--node-ceiling 3:2: needs")  # one past


def test_ldprobe_trainer_prefetch_last_wins():
    assert ldprobe.trainer_prefetch([], 3) == 3
    assert ldprobe.trainer_prefetch(["--prefetch", "5"], None) == 5
    assert ldprobe.trainer_prefetch(["--prefetch=2", "--bucket-mb", "4", "--prefetch", "6"], 1) == 6
    assert ldprobe.trainer_prefetch(["--prefetch", "x"], 4) == 4
