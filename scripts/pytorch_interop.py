"""Cross-checks pipesched against PyTorch's torch.distributed.pipelining (run by
scripts/pytorch-interop.sh, which sets up the interpreter; not part of the default tests).

  python3 pytorch_interop.py PIPESCHED_BINARY WORK_DIR [--quick] [--offline] [--timeout S]
  python3 pytorch_interop.py --dump-references DIR
  python3 pytorch_interop.py --budget-figures FILE PIPESCHED_BINARY

0. PyTorch's stored dumps (tests/data/pytorch215/reference_*.csv and the other files
   REFERENCES names, written by PyTorch 2.15.0) against pipesched's generator of the same
   schedule and size; needs no PyTorch. Each pair must hold the same compute actions on every
   rank, and either the same order on every rank or the same makespan under pipesched's unit
   costs (simulate's default); anything else fails. --offline runs this part only.
1. PyTorch's schedule classes against pipesched's generators, compared the same way: each
   class's compute-only and lowered dumps are read, validated and simulated by pipesched, and
   the compute-only one is compared with pipesched's own schedule of the same name and size.
2. pipesched's files in PyTorch: every generator's compute-only CSV and its --comm CSV are
   loaded by PyTorch's runtime, which checks them as it checks its own (stage mapping, counts,
   a wait for every send, one gradient reduction at a time). Each channel's order is checked
   here too, since PyTorch relies on it without checking. The --comm file written with
   --max-outstanding-sends 1 is also loaded by a runtime built with max_outstanding_sends=1,
   and must be taken, and its makespan (unit costs) must be no worse than that of PyTorch's
   own lowering of the compute-only file under max_outstanding_sends=1; how many plain --comm
   files that runtime takes is printed. A generator pipesched refuses to write at every size
   fails (chimera, whose replicas PyTorch cannot run, must be refused saying so).
3. A few --comm files run in PyTorch's runtime on gloo processes (CPU); each stage's gradients
   are compared with sequential training of the same model. As a negative control, two of
   them are also run with each receive moved right before its consumer (which breaks a
   channel's order there): pipesched must refuse that file and PyTorch must get it wrong.

Every pipesched command and every PyTorch run gets --timeout seconds (default 300); one that
takes longer is killed and counts as a failure, as does any file PyTorch refuses. Exits 1 when
any check fails and prints one line per check. --dump-references writes the stored dumps of
part 0 again (PyTorch needed). --budget-figures FILE BINARY writes
tests/data/send_budget/pytorch215_makespans.csv again: for every case of BUDGET_ORDERS x
BUDGET_GRID x BUDGETS, the makespan under simulate's unit costs of pipesched's compute-only
schedule and of PyTorch's own lowering of it under max_outstanding_sends (PyTorch needed).
"""

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

# PyTorch is imported by load_torch(), so that part 0 runs without it.
torch = dist = mp = PipelineStage = S = None

FAILURES = []
TIMEOUT = 300.0
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")


def load_torch():
    global torch, dist, mp, PipelineStage, S
    import torch as torch_module
    import torch.distributed as dist_module
    import torch.multiprocessing as mp_module
    from torch.distributed.pipelining import PipelineStage as stage_class
    from torch.distributed.pipelining import schedules as schedules_module

    torch, dist, mp, PipelineStage, S = (torch_module, dist_module, mp_module, stage_class,
                                         schedules_module)


def report(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def run(binary, *args):
    """Runs pipesched; a run past TIMEOUT is killed and reported (rc 124)."""
    # Its own process group, so that a hung command's children are killed with it.
    p = subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        what = f"pipesched {' '.join(args[:3])} ... timed out after {TIMEOUT:g} s (killed)"
        report(False, what)
        return 124, what
    return p.returncode, out


STAGE_WIDE = ("UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD")


def csv_rows(path):
    """Each rank's compute actions as strings: idle cells and the whole-stage actions
    (gradient reduction, FSDP), which pipesched's generators do not write, left out."""
    with open(path, newline="") as f:
        return [[c for c in row if c.strip() and not c.strip().lstrip("0123456789") in STAGE_WIDE]
                for row in csv.reader(f)]


def compare(binary, work, tag, theirs, ours_name, p, m, chunks):
    """PyTorch's compute-only file `theirs` against pipesched's `ours_name` of the same size:
    the same compute actions on every rank, and the same order or the same makespan."""
    mine = os.path.join(work, f"ours_{ours_name}_{p}_{m}_{chunks}.csv")
    args = ["generate", "--schedule", ours_name, "--ranks", str(p), "--microbatches", str(m),
            "-o", mine]
    rc, out = run(binary, *args)
    if rc != 0:
        report(False, f"{tag}: pipesched cannot generate {ours_name}: {out.strip()[:200]}")
        return
    a, b = csv_rows(theirs), csv_rows(mine)
    compute_only = os.path.join(work, "theirs_" + os.path.basename(theirs))
    with open(compute_only, "w", newline="") as f:
        csv.writer(f).writerows(a)
    theirs = compute_only
    if [sorted(r) for r in a] != [sorted(r) for r in b]:
        report(False, f"{tag}: pipesched's {ours_name} holds other actions than PyTorch's "
               f"({sum(map(len, b))} actions on {len(b)} ranks against {sum(map(len, a))} on "
               f"{len(a)})")
        return
    theirs_ms, out1 = makespan(binary, theirs)
    ours_ms, out2 = makespan(binary, mine)
    if a == b:
        report(True, f"{tag}: pipesched's {ours_name} has PyTorch's order on every rank "
               f"(makespan {ours_ms})")
    else:
        same = theirs_ms is not None and ours_ms is not None and abs(theirs_ms - ours_ms) < 1e-9
        report(same, f"{tag}: pipesched's {ours_name} orders some rank differently; makespan "
               f"{ours_ms} against PyTorch's {theirs_ms}"
               + ("" if same else " (must be equal)"))


def makespan(binary, path):
    rc, out = run(binary, "simulate", path, "--json")
    if rc != 0:
        return None, out
    try:
        return json.loads(out)["makespan"], out
    except (ValueError, KeyError):
        return None, out


# A stand-in for a pipeline stage with only what the schedule classes read when they build
# and lower their action lists (no model, no process group).
class PlanStage:
    def __init__(self, stage_index, num_stages, group_size, group_rank):
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = torch.nn.Identity()
        self.stage_index_to_group_rank = {}


def rank_stages(placement, rank):
    return [s for s, r in enumerate(placement) if r == rank]


def looped(ranks, chunks):
    return [s % ranks for s in range(ranks * chunks)]


def v_shape(ranks):
    return [s if s < ranks else 2 * ranks - 1 - s for s in range(2 * ranks)]


# PyTorch's schedule classes and the pipesched generator of the same schedule (chunks: stages
# per rank; pipesched's generators default to the same). Schedule1F1B is left out: in 2.15.0 its
# pipeline_order, a display form its step does not run, gives rank 1 microbatches 1 to M (M out
# of range, 0 missing), so there is nothing to compare.
CLASSES = [
    ("ScheduleGPipe", "gpipe", "linear", 1),
    ("ScheduleInterleaved1F1B", "interleaved-1f1b", "looped", 2),
    ("ScheduleLoopedBFS", "looped-bfs", "looped", 2),
    ("ScheduleInterleavedZeroBubble", "interleaved-zb", "looped", 2),
    ("ScheduleZBVZeroBubble", "zb-v", "v", 2),
    ("ScheduleDualPipeV", "dualpipe-v", "v", 2),
]
REFERENCE_SIZES = [(2, 4), (4, 8)]

# Part 0's stored dumps: (file under tests/data, pipesched generator, ranks, microbatches).
REFERENCES = [
    ("pytorch215/interleaved1f1b_2rank_4mb_compute.csv", "interleaved-1f1b", 2, 4),
    ("pytorch/zb1p_2rank_2stagep_compute.csv", "interleaved-zb", 2, 8),
    ("pytorch/dualpipev_4rank_10mb.csv", "dualpipe-v", 4, 10),
] + [(f"pytorch215/reference_{cls}_p{p}_m{m}.csv", ours, p, m)
     for cls, ours, _, _ in CLASSES for p, m in REFERENCE_SIZES]


def placement_for(shape, p, chunks):
    if shape == "linear":
        return list(range(p))
    return looped(p, chunks) if shape == "looped" else v_shape(p)


def class_schedule(cls, shape, p, m, chunks):
    """PyTorch's schedule object of class `cls` for rank 0, or raises what PyTorch raised."""
    placement = placement_for(shape, p, chunks)
    n = len(placement)
    if shape == "linear":  # a single-stage class: one stage per rank
        return cls(PlanStage(0, n, p, 0), m)
    return cls([PlanStage(s, n, p, 0) for s in rank_stages(placement, 0)], m)


def write_compute_only(sched, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        for r in sorted(sched.pipeline_order):
            w.writerow(sched.pipeline_order[r])


def dump_references(out_dir):
    load_torch()
    for cls_name, _, shape, chunks in CLASSES:
        for p, m in REFERENCE_SIZES:
            sched = class_schedule(getattr(S, cls_name), shape, p, m, chunks)
            write_compute_only(sched, os.path.join(out_dir, f"reference_{cls_name}_p{p}_m{m}.csv"))


# The grid of --budget-figures: (pipesched generator, --chunks or None for its default) x ranks x
# microbatches x max_outstanding_sends. Every generator whose files PyTorch can run (chimera's
# replicas it cannot), the looped ones with 2 and 3 chunks.
BUDGET_ORDERS = [("gpipe", None), ("1f1b", None), ("interleaved-1f1b", 2), ("interleaved-1f1b", 3),
                 ("looped-bfs", 2), ("looped-bfs", 3), ("zb-h1", None), ("zb-h2", None),
                 ("zb-v", None), ("interleaved-zb", 2), ("interleaved-zb", 3), ("v-half", None),
                 ("v-min", None), ("dualpipe-v", None), ("seq-1f1b", None), ("slice-pipe", 2),
                 ("slice-pipe", 3)]
BUDGET_GRID = [(p, m) for p in (2, 3, 4, 8) for m in (4, 9, 16, 32)]
BUDGETS = (1, 2)


def lower_in_pytorch(path, p, m, budget, out_path):
    """PyTorch's own lowering of the compute-only file `path` (its add-send-recv and send-wait
    passes) in a runtime built with max_outstanding_sends=budget, written as CSV to out_path."""
    rows = read_rows(path)
    placement = placement_of(rows)
    n = len(placement)
    rt = S._PipelineScheduleRuntime([PlanStage(s, n, p, 0) for s in rank_stages(placement, 0)], m,
                                    max_outstanding_sends=budget)
    rt._load_csv(path, format="compute_only")
    with open(out_path, "w", newline="") as f:
        w = csv.writer(f)
        for r in sorted(rt.pipeline_order_with_comms):
            w.writerow(rt.pipeline_order_with_comms[r])


def budget_figures(binary, work, out):
    """Writes `out`: for each case of the budget grid, the makespan (simulate's unit costs) of
    pipesched's compute-only schedule and of PyTorch's lowering of it under the budget."""
    load_torch()
    lines = ["schedule,chunks,ranks,microbatches,budget,compute_makespan,pytorch_makespan"]
    for name, chunks in BUDGET_ORDERS:
        for p, m in BUDGET_GRID:
            path = os.path.join(work, "budget_compute.csv")
            args = ["generate", "--schedule", name, "--ranks", str(p), "--microbatches", str(m),
                    "--format", "pytorch", "-o", path]
            if chunks is not None:
                args += ["--chunks", str(chunks)]
            rc, out_text = run(binary, *args)
            if rc != 0:
                print(f"skip  {name} chunks={chunks} p={p} m={m}: {out_text.strip()[:120]}")
                continue
            plain, _ = makespan(binary, path)
            for budget in BUDGETS:
                lowered = os.path.join(work, "budget_pytorch.csv")
                try:
                    lower_in_pytorch(path, p, m, budget, lowered)
                except Exception as e:  # PyTorch cannot meet the budget: no figure
                    print(f"skip  {name} chunks={chunks} p={p} m={m} budget {budget}: "
                          f"PyTorch refuses it ({str(e)[:120]})")
                    continue
                theirs, text = makespan(binary, lowered)
                if theirs is None:
                    report(False, f"{name} p={p} m={m} budget {budget}: pipesched cannot "
                           f"simulate PyTorch's lowering: {text.strip()[:200]}")
                    continue
                lines.append(f"{name},{chunks or 0},{p},{m},{budget},{plain:.12g},{theirs:.12g}")
                print(lines[-1], flush=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def part0(binary, work):
    for file, ours, p, m in REFERENCES:
        path = os.path.join(DATA, file)
        if not os.path.exists(path):
            report(False, f"{file}: missing (scripts/pytorch_interop.py --dump-references writes it)")
            continue
        compare(binary, work, f"stored {file}", path, ours, p, m, 0)


def part1(binary, work, grid):
    for cls_name, ours, shape, chunks in CLASSES:
        cls = getattr(S, cls_name, None)
        if cls is None:
            report(False, f"{cls_name}: not in this PyTorch")
            continue
        for p, m in grid:
            tag = f"{cls_name} p={p} m={m}"
            try:
                sched = class_schedule(cls, shape, p, m, chunks)
            except Exception as e:  # a size the class refuses
                print(f"skip  {tag}: PyTorch refuses it ({e})")
                continue
            for fmt in ("compute_only", "compute_comms"):
                if fmt == "compute_comms" and shape == "linear":
                    continue  # single-stage classes lower at run time, not in a dump
                path = os.path.join(work, f"torch_{cls_name}_{p}_{m}_{fmt}.csv")
                try:
                    if fmt == "compute_only":
                        write_compute_only(sched, path)
                    else:
                        sched._dump_csv(path, format="compute_comms")
                except Exception as e:
                    report(False, f"{tag} {fmt}: PyTorch cannot dump it ({e})")
                    continue
                rc, out = run(binary, "validate", path)
                report(rc == 0, f"{tag} {fmt}: pipesched validates PyTorch's dump"
                       + ("" if rc == 0 else ": " + out.strip()[:300]))
                if rc == 0 and fmt == "compute_only":
                    compare(binary, work, f"{tag} {fmt}", path, ours, p, m, chunks)


def fifo_problem(rows, placement):
    """The first channel whose receives are not in the order of its sends, or None."""
    sends, recvs = {}, {}
    for r, row in enumerate(rows):
        for a in row:
            if a is None or a.computation_type not in (S.SEND_F, S.SEND_B, S.RECV_F, S.RECV_B):
                continue
            s, mb, t = a.stage_index, a.microbatch_index, a.computation_type
            if t == S.SEND_F:
                sends.setdefault((r, placement[s + 1]), []).append(("F", s, mb))
            elif t == S.SEND_B:
                sends.setdefault((r, placement[s - 1]), []).append(("B", s, mb))
            elif t == S.RECV_F:
                recvs.setdefault((placement[s - 1], r), []).append(("F", s - 1, mb))
            else:
                recvs.setdefault((placement[s + 1], r), []).append(("B", s + 1, mb))
    for ch, msgs in sends.items():
        got = recvs.get(ch, [])
        if got != msgs:
            return f"channel {ch[0]}->{ch[1]}: sends {msgs[:4]}..., receives {got[:4]}..."
    return None


def read_rows(path):
    with open(path, newline="") as f:
        return [[S._Action.from_str(c) for c in row] for row in csv.reader(f)]


def placement_of(rows):
    first = {}
    for r, row in enumerate(rows):
        for a in row:
            if a is None:
                continue
            for x in a.sub_actions or (a,):
                first.setdefault(x.stage_index, r)
    return [first[s] for s in range(len(first))]


def load_in_runtime(path, p, m, comm, **options):
    """Loads the file in PyTorch's runtime on every rank: (True, "") or (False, why)."""
    rows = read_rows(path)
    placement = placement_of(rows)
    n = len(placement)
    try:
        for rank in range(p):
            rt = S._PipelineScheduleRuntime(
                [PlanStage(s, n, p, rank) for s in rank_stages(placement, rank)], m, **options
            )
            rt._load_csv(path, format="compute_comms" if comm else "compute_only")
    except Exception as e:
        return False, f": {type(e).__name__}: {str(e)[:300]}"
    if comm:
        why = fifo_problem(rows, placement)
        if why is not None:
            return False, ": " + why
    return True, ""


# Generators pipesched refuses to write for PyTorch at any size, and a word the refusal holds.
PYTORCH_REFUSED = {"chimera": "replicas"}


def part2(binary, work, gens, grid):
    checked = 0
    plain_taken = plain_total = budget_taken = 0
    for name in gens:
        generated = 0
        refusals = []
        for p, m in grid:
            for comm in (False, True):
                path = os.path.join(work, f"gen_{name}_{p}_{m}_{int(comm)}.csv")
                args = ["generate", "--schedule", name, "--ranks", str(p),
                        "--microbatches", str(m), "--format", "pytorch", "-o", path]
                if comm:
                    args.append("--comm")
                rc, out = run(binary, *args)
                if rc == 124:
                    break
                if rc != 0:
                    print(f"skip  {name} p={p} m={m}: {out.strip()[:160]}")
                    refusals.append(out.strip())
                    break
                generated += 1
                tag = f"{name} p={p} m={m} {'comm' if comm else 'compute'}"
                ok, why = load_in_runtime(path, p, m, comm)
                report(ok, f"{tag}: PyTorch loads and checks pipesched's file" + why)
                checked += 1
                if not comm:
                    continue
                # PyTorch's runtime with max_outstanding_sends=1 moves waits itself where it can
                # and refuses the file where it cannot: the plain file is counted, the file
                # written for that budget must be taken.
                plain_total += 1
                plain_taken += load_in_runtime(path, p, m, True, max_outstanding_sends=1)[0]
                budget = os.path.join(work, f"gen_{name}_{p}_{m}_budget1.csv")
                rc, out = run(binary, *args[:-3], "-o", budget, "--comm",
                              "--max-outstanding-sends", "1")
                if rc != 0:
                    report(False, f"{tag} --max-outstanding-sends 1: pipesched cannot write it: "
                           + out.strip()[:200])
                    continue
                ok, why = load_in_runtime(budget, p, m, True, max_outstanding_sends=1)
                budget_taken += ok
                report(ok, f"{tag} --max-outstanding-sends 1: PyTorch's runtime with "
                       "max_outstanding_sends=1 takes it" + why)
                # Its makespan (unit costs) against PyTorch's own lowering of the same compute
                # order under the same budget: never slower.
                theirs_path = os.path.join(work, f"gen_{name}_{p}_{m}_torch_budget1.csv")
                try:
                    lower_in_pytorch(os.path.join(work, f"gen_{name}_{p}_{m}_0.csv"), p, m, 1,
                                     theirs_path)
                except Exception as e:
                    print(f"skip  {tag}: PyTorch cannot lower it under max_outstanding_sends=1 "
                          f"({str(e)[:120]})")
                    continue
                ours_ms, _ = makespan(binary, budget)
                theirs_ms, _ = makespan(binary, theirs_path)
                report(ours_ms is not None and theirs_ms is not None
                       and ours_ms <= theirs_ms + 1e-9,
                       f"{tag} --max-outstanding-sends 1: makespan {ours_ms} against "
                       f"{theirs_ms} for PyTorch's lowering under max_outstanding_sends=1")
        # A generator refused at every size checked nothing: that is a failure, except for the
        # one PyTorch cannot run at all (several model replicas), which must say so.
        if generated == 0:
            if name in PYTORCH_REFUSED:
                report(bool(refusals) and all(PYTORCH_REFUSED[name] in r for r in refusals),
                       f"{name}: pipesched refuses it for PyTorch at every size, as it must "
                       f"({PYTORCH_REFUSED[name]})")
            else:
                report(False, f"{name}: pipesched refuses it for PyTorch at every size, so none "
                       "of its files was checked: " + (refusals[0][:200] if refusals else ""))
    print(f"      {checked} pipesched files loaded by PyTorch")
    print(f"      max_outstanding_sends=1: PyTorch's runtime takes {plain_taken} of {plain_total} "
          f"plain --comm files and {budget_taken} of {plain_total} written with "
          "--max-outstanding-sends 1")


# Part 3: a small model, one Linear+Tanh block per stage, trained one step in PyTorch's runtime
# and sequentially; gradients compared per stage.
WIDTH = 8


def make_model(num_stages):
    torch.manual_seed(0)
    return torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())
        for _ in range(num_stages)
    ).double()


def worker(rank, world, path, num_stages, m, placement, out_dir, port, options):
    load_torch()  # a spawned process imports this file afresh
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = make_model(num_stages)
        torch.manual_seed(1)
        x = torch.randn(m * 2, WIDTH, dtype=torch.float64)
        y = torch.randn(m * 2, WIDTH, dtype=torch.float64)
        mine = rank_stages(placement, rank)
        stages = [PipelineStage(model[s], s, num_stages, torch.device("cpu")) for s in mine]
        loss = torch.nn.MSELoss(reduction="sum")
        rt = S._PipelineScheduleRuntime(stages, m, loss_fn=loss, scale_grads=False, **options)
        rt._load_csv(path, format="compute_comms")
        if placement[0] == rank:
            rt.step(x, target=y)
        else:
            rt.step(target=y)
        grads = {s: [p.grad.clone() for p in model[s].parameters()] for s in mine}
        torch.save(grads, os.path.join(out_dir, f"grads_{rank}.pt"))
    finally:
        dist.destroy_process_group()


def consumer_order(path, out_path):
    """The file with each receive moved right before the action that consumes it: how
    pipesched lowered before it kept channels in order (the negative control)."""
    rows = read_rows(path)
    fixed = []
    for row in rows:
        recvs = [a for a in row if a.computation_type in (S.RECV_F, S.RECV_B)]
        rest = [a for a in row if a.computation_type not in (S.RECV_F, S.RECV_B)]
        out = []
        for a in rest:
            for x in a.sub_actions or (a,):
                want = {S.FORWARD: S.RECV_F, S.FULL_BACKWARD: S.RECV_B,
                        S.BACKWARD_INPUT: S.RECV_B}.get(x.computation_type)
                for r in recvs:
                    if (r.computation_type == want and r.stage_index == x.stage_index
                            and r.microbatch_index == x.microbatch_index):
                        out.append(r)
            out.append(a)
        fixed.append(out)
    with open(out_path, "w", newline="") as f:
        w = csv.writer(f)
        for row in fixed:
            w.writerow(row)


def run_in_pytorch(path, p, m, work, port, **options):
    """Runs the file on p gloo processes; returns (worst gradient difference, error text)."""
    placement = placement_of(read_rows(path))
    n = len(placement)
    out_dir = tempfile.mkdtemp(dir=work)
    try:
        ctx = mp.spawn(worker, args=(p, path, n, m, placement, out_dir, port, options), nprocs=p,
                       join=False)
        deadline = time.monotonic() + TIMEOUT
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                for proc in ctx.processes:
                    if proc.is_alive():
                        proc.kill()
                for proc in ctx.processes:
                    proc.join()
                return None, f"timed out after {TIMEOUT:g} s (killed)"
    except Exception as e:
        return None, str(e)[-400:]
    model = make_model(n)
    torch.manual_seed(1)
    x = torch.randn(m * 2, WIDTH, dtype=torch.float64)
    y = torch.randn(m * 2, WIDTH, dtype=torch.float64)
    h = x
    for s in range(n):
        h = model[s](h)
    torch.nn.MSELoss(reduction="sum")(h, y).backward()
    worst = 0.0
    for rank in range(p):
        got = torch.load(os.path.join(out_dir, f"grads_{rank}.pt"))
        for s, gs in got.items():
            for g, ref in zip(gs, model[s].parameters()):
                worst = max(worst, (g - ref.grad).abs().max().item())
    return worst, ""


def part3(binary, work, cases, controls):
    port = 29600
    for name, p, m in cases:
        path = os.path.join(work, f"run_{name}_{p}_{m}.csv")
        rc, out = run(binary, "generate", "--schedule", name, "--ranks", str(p),
                      "--microbatches", str(m), "--comm", "--format", "pytorch", "-o", path)
        tag = f"{name} p={p} m={m}"
        if rc != 0:
            report(False, f"{tag}: pipesched cannot write it: {out.strip()[:200]}")
            continue
        port += 1
        worst, err = run_in_pytorch(path, p, m, work, port)
        if worst is None:
            report(False, f"{tag}: PyTorch's runtime failed: {err}")
            continue
        report(worst < 1e-9, f"{tag}: gradients match sequential training (max diff {worst:.2e})")
        # The file written for a budget of one open send, in a runtime held to it.
        budget = os.path.join(work, f"run_{name}_{p}_{m}_budget1.csv")
        rc, out = run(binary, "generate", "--schedule", name, "--ranks", str(p),
                      "--microbatches", str(m), "--comm", "--max-outstanding-sends", "1",
                      "--format", "pytorch", "-o", budget)
        if rc != 0:
            report(False, f"{tag} --max-outstanding-sends 1: pipesched cannot write it: "
                   + out.strip()[:200])
        else:
            port += 1
            worst, err = run_in_pytorch(budget, p, m, work, port, max_outstanding_sends=1)
            report(worst is not None and worst < 1e-9,
                   f"{tag} --max-outstanding-sends 1, max_outstanding_sends=1: "
                   + (f"gradients match sequential training (max diff {worst:.2e})"
                      if worst is not None else f"PyTorch's runtime failed: {err}"))
        if (name, p, m) not in controls:
            continue
        # The negative control: receives before their consumers break a channel's order here,
        # and PyTorch must then compute something else (or fail); else this check proves nothing.
        bad = os.path.join(work, f"control_{name}_{p}_{m}.csv")
        consumer_order(path, bad)
        rc, out = run(binary, "validate", bad)
        report(rc == 1 and "first-in first-out" in out,
               f"{tag} control: pipesched refuses the consumer-ordered file")
        port += 1
        worst, err = run_in_pytorch(bad, p, m, work, port)
        report(worst is None or worst > 1e-6,
               f"{tag} control: PyTorch runs the consumer-ordered file wrong ("
               + (f"max diff {worst:.2e}" if worst is not None else "it fails") + ")")


def main():
    global TIMEOUT
    argv = sys.argv[1:]
    if argv[:1] == ["--dump-references"]:
        dump_references(argv[1])
        return
    if argv[:1] == ["--budget-figures"]:
        work = tempfile.mkdtemp()
        budget_figures(argv[2], work, argv[1])
        return
    if "--timeout" in argv:
        i = argv.index("--timeout")
        TIMEOUT = float(argv[i + 1])
        del argv[i:i + 2]
    binary, work = argv[0], argv[1]
    quick = "--quick" in argv
    offline = "--offline" in argv
    os.makedirs(work, exist_ok=True)
    part0(binary, work)
    if not offline:
        load_torch()
        print(f"PyTorch {torch.__version__}")
        grid = [(2, 4), (4, 8)] if quick else [(2, 4), (2, 8), (4, 8), (4, 12)]
        part1(binary, work, grid)
        rc, out = run(binary, "list", "--json")
        gens = [g["name"] for g in json.loads(out)["schedules"]] if rc == 0 else []
        report(bool(gens), "pipesched lists its generators")
        part2(binary, work, gens, grid)
        runs = [("zb-v", 2, 4), ("zb-v", 4, 8), ("dualpipe-v", 4, 8), ("slice-pipe", 2, 4),
                ("interleaved-1f1b", 2, 4), ("1f1b", 4, 8), ("zb-h1", 2, 4)]
        part3(binary, work, runs, controls={("zb-v", 2, 4), ("dualpipe-v", 4, 8)})
    print(f"{len(FAILURES)} checks failed" if FAILURES else "all checks passed")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
