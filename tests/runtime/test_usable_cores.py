"""The usable core count: the affinity mask capped by the cgroup CPU quota (v2 `cpu.max`, v1
`cpu.cfs_quota_us` / `cpu.cfs_period_us`), read from hand-written cgroup files; and the OpenMP
defaults a trivium process starts with."""

from pathlib import Path

import pytest

from trivium.runtime.cpu_share import split_cores
from trivium.runtime.openmp_defaults import apply_openmp_defaults
from trivium.runtime.usable_cores import affinity_cores, cgroup_cpu_quota, usable_cores


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def cgroups(tmp_path: Path, proc_self_cgroup: str, files: dict[str, str]) -> dict:
    """A cgroup tree under tmp_path/cgroup and a /proc/self/cgroup naming the process's place in it."""
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    for relative, text in files.items():
        write(root / relative, text)
    write(tmp_path / "proc_self_cgroup", proc_self_cgroup)
    return {"cgroup_root": root, "proc_self_cgroup": tmp_path / "proc_self_cgroup"}


@pytest.mark.parametrize(
    "cpu_max, cores",
    [("150000 100000\n", 1.5), ("50000 100000\n", 0.5), ("400000 200000\n", 2.0), ("max 100000\n", None)],
)
def test_cgroup_v2_cpu_max_is_quota_over_period_and_max_is_no_limit(tmp_path, cpu_max, cores):
    assert cgroup_cpu_quota(**cgroups(tmp_path, "0::/\n", {"cpu.max": cpu_max})) == cores


def test_cgroup_v2_the_tightest_limit_of_the_process_cgroup_and_its_parents_wins(tmp_path):
    paths = cgroups(
        tmp_path,
        "0::/jobs/job7\n",
        {
            "cpu.max": "max 100000",
            "jobs/cpu.max": "300000 100000",
            "jobs/job7/cpu.max": "max 100000",
            "jobs/other/cpu.max": "50000 100000",  # a sibling's limit is not the process's
        },
    )
    assert cgroup_cpu_quota(**paths) == 3.0


@pytest.mark.parametrize(
    "quota, period, cores", [("50000", "100000", 0.5), ("250000", "100000", 2.5), ("-1", "100000", None)]
)
def test_cgroup_v1_cfs_quota_over_period_and_minus_one_is_no_limit(tmp_path, quota, period, cores):
    paths = cgroups(
        tmp_path,
        "3:cpuset:/\n2:cpu,cpuacct:/\n1:memory:/\n",
        {
            "cpu,cpuacct/cpu.cfs_quota_us": quota + "\n",
            "cpu,cpuacct/cpu.cfs_period_us": period + "\n",
        },
    )
    assert cgroup_cpu_quota(**paths) == cores


def test_cgroup_v1_inside_a_container_reads_the_mount_when_the_host_path_is_not_there(tmp_path):
    # /proc/self/cgroup names the cgroup as the host sees it; the container mounts that cgroup as the root.
    paths = cgroups(
        tmp_path,
        "2:cpu,cpuacct:/docker/4f2a\n",
        {
            "cpu/cpu.cfs_quota_us": "150000",
            "cpu/cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_cpu_quota(**paths) == 1.5


def test_no_cgroup_files_or_unreadable_ones_mean_no_limit(tmp_path):
    assert cgroup_cpu_quota(**cgroups(tmp_path, "0::/\n", {})) is None
    assert cgroup_cpu_quota(**cgroups(tmp_path / "garbled", "0::/\n", {"cpu.max": "lots of cores"})) is None
    assert (
        cgroup_cpu_quota(cgroup_root=tmp_path / "absent", proc_self_cgroup=tmp_path / "absent_proc") is None
    )


def test_usable_cores_are_the_affinity_mask_capped_by_the_quota_rounded_down_at_least_one(tmp_path):
    assert usable_cores(**cgroups(tmp_path / "a", "0::/\n", {"cpu.max": "150000 100000"})) == 1
    assert usable_cores(**cgroups(tmp_path / "b", "0::/\n", {"cpu.max": "20000 100000"})) == 1
    assert (
        usable_cores(**cgroups(tmp_path / "c", "0::/\n", {"cpu.max": "6400000 100000"})) == affinity_cores()
    )
    assert usable_cores(**cgroups(tmp_path / "d", "0::/\n", {"cpu.max": "max 100000"})) == affinity_cores()


def test_both_mode_splits_the_usable_cores_not_the_machines(monkeypatch):
    monkeypatch.setattr("trivium.runtime.cpu_share.usable_cores", lambda: 3)
    assert split_cores() == (2, 1)


def test_openmp_defaults_set_a_short_spin_and_a_thread_count_when_a_quota_leaves_fewer_cores():
    environment = {}
    apply_openmp_defaults(environment, cores=3, affinity=8)
    assert environment == {"OMP_NUM_THREADS": "3", "GOMP_SPINCOUNT": "30000"}
    no_quota = {}
    apply_openmp_defaults(no_quota, cores=8, affinity=8)
    assert no_quota == {"GOMP_SPINCOUNT": "30000"}  # OpenMP already takes one thread per core of the mask


def test_openmp_defaults_keep_the_users_values():
    chosen = {"OMP_NUM_THREADS": "1", "GOMP_SPINCOUNT": "0"}
    apply_openmp_defaults(chosen, cores=3, affinity=8)
    assert chosen == {"OMP_NUM_THREADS": "1", "GOMP_SPINCOUNT": "0"}
    policy = {"OMP_WAIT_POLICY": "ACTIVE"}  # the user's policy sets the spin count itself
    apply_openmp_defaults(policy, cores=8, affinity=8)
    assert policy == {"OMP_WAIT_POLICY": "ACTIVE"}
