"""The C ABI as the Python package sees it: version, struct layouts, status codes, handle checks, CUDA probe."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ctxcache
from ctxcache import _ffi, device, enums, errors
from ctxcache._ffi import ffi, lib
from ctxcache._ffi_build import read_header

HEADER_TEXT = read_header(Path(_ffi._header_path))  # the umbrella with its parts (include/ctxcache/c/)


def _header_structs(text: str) -> list[str]:
    """The typedef names of every `typedef struct x { ... } name_t;` (nested braces allowed)."""
    names = []
    for match in re.finditer(r"typedef\s+struct\s+\w*\s*\{", text):
        depth, i = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        names.append(re.match(r"\s*(\w+)\s*;", text[i:]).group(1))
    return sorted(set(names))


HEADER_STRUCTS = _header_structs(HEADER_TEXT)

pytest_plugins = ["pytester"]


# ---- version and layout ---------------------------------------------------------------------------------------


def test_abi_version_of_library_matches_header():
    declared = int(re.search(r"#define\s+CTXC_ABI_VERSION\s+(\d+)", HEADER_TEXT).group(1))
    assert declared == 5
    assert ctxcache.HEADER_ABI_VERSION == declared
    assert ctxcache.abi_version() == declared
    assert lib.ctxc_abi_version() == declared


def test_header_declares_the_known_structs():
    # The parse below must find every struct; if this list shrinks the layout test silently covers less.
    for name in ("ctxc_hash128_t", "ctxc_resource_demand_t", "ctxc_hasher_options_t", "ctxc_media_span_key_t",
                 "ctxc_block_key_extras_t", "ctxc_manager_options_t", "ctxc_reuse_plan_t", "ctxc_acquire_result_t",
                 "ctxc_hybrid_candidate_t", "ctxc_hybrid_snapshot_reservation_t", "ctxc_hybrid_checkpoint_key_t",
                 "ctxc_publish_result_t", "ctxc_manager_metrics_t", "ctxc_record_view_t", "ctxc_lease_info_t"):
        assert name in HEADER_STRUCTS


@pytest.mark.parametrize("name", HEADER_STRUCTS)
def test_struct_layout_matches_library(name):
    # cffi ABI mode computes layouts from the cdef alone: the library's own sizeof must agree.
    library_size = lib.ctxc_sizeof(name.encode())
    assert library_size > 0, f"ctxc_sizeof does not know {name}"
    assert ffi.sizeof(name) == library_size


def test_hash128_is_two_uint64_words():
    assert ffi.sizeof("ctxc_hash128_t") == 16
    assert ffi.offsetof("ctxc_hash128_t", "hi") == 0
    assert ffi.offsetof("ctxc_hash128_t", "lo") == 8


def test_sizeof_unknown_or_null_name_is_zero():
    assert lib.ctxc_sizeof(b"ctxc_no_such_t") == 0
    assert lib.ctxc_sizeof(ffi.NULL) == 0


# ---- status codes -----------------------------------------------------------------------------------------

STATUS_EXCEPTIONS = {
    "CTXC_E_INVALID_ARGUMENT": ctxcache.InvalidArgumentError,
    "CTXC_E_CONTRACT": ctxcache.ContractError,
    "CTXC_E_INVALID_HANDLE": ctxcache.InvalidHandleError,
    "CTXC_E_NO_MEMORY": ctxcache.OutOfMemoryError,
    "CTXC_E_INVARIANT": ctxcache.InvariantError,
    "CTXC_E_LEASES_OUTSTANDING": ctxcache.LeasesOutstandingError,
    "CTXC_E_BUFFER_TOO_SMALL": ctxcache.BufferTooSmallError,
    "CTXC_E_UNSUPPORTED": ctxcache.UnsupportedError,
    "CTXC_E_INTERNAL": ctxcache.InternalError,
    "CTXC_E_DEVICE": ctxcache.DeviceError,
    "CTXC_E_REQUEST_FAILED": ctxcache.RequestFailedError,
    "CTXC_E_POISONED": ctxcache.PoisonedError,
    "CTXC_E_CONCURRENT_USE": ctxcache.ConcurrentUseError,
    "CTXC_E_INTERRUPTED": ctxcache.InterruptedCallError,
}


def _library_constants(prefix: str) -> dict[str, int]:
    """Every CTXC_ constant of the header (the cdef) whose name starts with `prefix`, read from the library."""
    return {name: getattr(lib, name) for name in dir(lib) if name.startswith(prefix)}


def test_every_error_code_below_the_sentinel_has_a_name_and_an_exception():
    # Iterating up to CTXC_STATUS_COUNT: a new code cannot be skipped by this test or by the mapping.
    codes = _library_constants("CTXC_E_")
    assert sorted(codes.values()) == list(range(1, lib.CTXC_STATUS_COUNT))
    assert set(codes) == set(STATUS_EXCEPTIONS)
    assert set(errors.STATUS_EXCEPTIONS) == set(range(1, lib.CTXC_STATUS_COUNT))
    for code in range(1, lib.CTXC_STATUS_COUNT):
        name = ffi.string(lib.ctxc_status_string(code)).decode()
        exception = STATUS_EXCEPTIONS[name]
        assert codes[name] == code
        assert exception.status == code
        assert errors.STATUS_EXCEPTIONS[code] is exception
        with pytest.raises(exception) as info:
            _ffi.check(code)
        assert type(info.value) is exception
        assert isinstance(info.value, ctxcache.Error)


# Every group of CTXC_ constants and the Python enum that mirrors it. A constant of no group fails the test, so a
# new group cannot go unmirrored.
ENUM_GROUPS = {
    "CTXC_RESOURCE_": enums.ResourceType,
    "CTXC_LOOKUP_": enums.LookupPolicy,
    "CTXC_PLAN_": enums.ReusePlanKind,
    "CTXC_MODE_": enums.ReusePlanMode,
    "CTXC_EVICTION_": enums.EvictionPolicy,
    "CTXC_SPEC_REPLAY_": enums.SpecReplayMode,
    "CTXC_ACQUIRE_": enums.AcquireStatus,
    "CTXC_PUBLISH_": enums.PublishStatus,
    "CTXC_PUBLICATION_GROWTH_": enums.PublicationGrowth,
    "CTXC_HASH_": enums.HashAlgorithm,
    "CTXC_LEASE_": enums.LeaseState,
    "CTXC_BACKEND_": device.BackendKind,
    "CTXC_DTYPE_": device.DType,
    "CTXC_ELEMENT_": device.Element,
    "CTXC_STATE_": device.StatePart,
    "CTXC_PAGE_TABLE_": device.PageTableMode,
    "CTXC_KV_LAYOUT_": device.KvLayout,
    "CTXC_MODEL_": enums.ModelStateKind,
    "CTXC_TOKEN_STATE_": enums.TokenStateContract,
    "CTXC_COMMIT_": enums.CommitPolicy,
    "CTXC_SEQUENCE_": enums.SequenceStatus,
    "CTXC_ADMIT_": enums.AdmitSequenceStatus,
    "CTXC_MEDIA_": enums.MediaModality,
    "CTXC_KV_EVENT_": enums.KvEventType,
    "CTXC_KV_EXTRA_KEY_": enums.KvExtraKeyKind,
    "CTXC_KV_MEDIUM_": enums.KvEventMedium,
    "CTXC_SCALAR_": enums.ScalarType,
    "CTXC_SIM_DEPLOYMENT_": enums.SimDeployment,
    "CTXC_SIM_SPECULATIVE_": enums.SimSpeculative,
    "CTXC_HOST_WRITE_": ctxcache.HostWritePolicy,
    "CTXC_KV_STORE_": ctxcache.StoreResult,
    "CTXC_STORE_LOAD_": ctxcache.StoreLoadPolicy,
}
# Constants that are no enum member, each with the Python name that mirrors it (None: nothing to mirror).
SINGLE_CONSTANTS = {
    "CTXC_OK": 0,
    "CTXC_STATUS_COUNT": None,
    "CTXC_DEFAULT_HASH_CHUNKS": device.DEFAULT_HASH_CHUNKS,
    "CTXC_INHERIT_LOOKUP_POLICY": None,  # Request.lookup_policy = None
    "CTXC_RETENTION_DEFAULT_PRIORITY": ctxcache.retention.DEFAULT_PRIORITY,
    "CTXC_RETENTION_MAX_PRIORITY": ctxcache.retention.MAX_PRIORITY,
    "CTXC_RETENTION_OPEN_END": None,  # RetentionRange.token_end = None
    "CTXC_RETENTION_NO_DURATION": None,  # RetentionRange.duration = None
}


@pytest.mark.parametrize("prefix", ENUM_GROUPS, ids=list(ENUM_GROUPS))
def test_python_enum_equals_the_library_constants(prefix):
    constants = {name[len(prefix):]: value for name, value in _library_constants(prefix).items()}
    members = {member.name: int(member) for member in ENUM_GROUPS[prefix]}
    assert constants, f"no {prefix}* constant in the header"
    assert members == constants


def test_every_library_constant_belongs_to_a_mirrored_group():
    unmirrored = [
        name for name in dir(lib)
        if name.startswith("CTXC_") and not name.startswith("CTXC_E_")
        and not any(name.startswith(prefix) for prefix in ENUM_GROUPS) and name not in SINGLE_CONSTANTS
    ]
    assert unmirrored == []
    assert lib.CTXC_OK == SINGLE_CONSTANTS["CTXC_OK"]
    assert lib.CTXC_DEFAULT_HASH_CHUNKS == SINGLE_CONSTANTS["CTXC_DEFAULT_HASH_CHUNKS"]
    assert lib.CTXC_RETENTION_DEFAULT_PRIORITY == SINGLE_CONSTANTS["CTXC_RETENTION_DEFAULT_PRIORITY"]
    assert lib.CTXC_RETENTION_MAX_PRIORITY == SINGLE_CONSTANTS["CTXC_RETENTION_MAX_PRIORITY"]


def test_ok_status_raises_nothing():
    assert lib.CTXC_OK == 0
    assert ffi.string(lib.ctxc_status_string(0)) == b"CTXC_OK"
    _ffi.check(0)


def test_unknown_status_is_an_internal_error():
    assert ffi.string(lib.ctxc_status_string(99)) == b"CTXC_UNKNOWN_STATUS"
    with pytest.raises(ctxcache.InternalError):
        _ffi.check(99)


def test_argument_errors_also_derive_from_the_builtins():
    assert issubclass(ctxcache.InvalidArgumentError, ValueError)
    assert issubclass(ctxcache.ArgumentTypeError, TypeError)
    assert issubclass(ctxcache.ArgumentTypeError, ctxcache.InvalidArgumentError)
    assert issubclass(ctxcache.OutOfMemoryError, MemoryError)
    for cls in (ctxcache.ContractError, ctxcache.InvalidHandleError, ctxcache.InvariantError,
                ctxcache.LeasesOutstandingError, ctxcache.BufferTooSmallError, ctxcache.UnsupportedError,
                ctxcache.InternalError, ctxcache.ArgumentTypeError):
        assert issubclass(cls, ctxcache.Error)


# ---- real statuses from the library, through the raw ABI ---------------------------------------------------


def _options(page_size=4, base=8, max_records=16):
    options = ffi.new("ctxc_manager_options_t *")
    lib.ctxc_manager_options_init(options)
    options.page_size = page_size
    options.capacities.base_kv_pages = base
    options.max_records = max_records
    return options


def test_options_init_fills_documented_defaults():
    options = ffi.new("ctxc_manager_options_t *")
    lib.ctxc_manager_options_init(options)
    assert options.struct_size == ffi.sizeof("ctxc_manager_options_t")
    assert options.page_size == 128
    assert options.max_records == 1024
    hasher = ffi.new("ctxc_hasher_options_t *")
    lib.ctxc_hasher_options_init(hasher)
    assert hasher.struct_size == ffi.sizeof("ctxc_hasher_options_t")
    assert hasher.algorithm == lib.CTXC_HASH_SHA256
    assert hasher.key == ffi.NULL and hasher.key_length == 0


def test_invalid_argument_message_names_function_and_argument():
    out = ffi.new("ctxc_manager_t **")
    assert lib.ctxc_manager_create(_options(page_size=0), out) == lib.CTXC_E_INVALID_ARGUMENT
    assert out[0] == ffi.NULL
    message = _ffi.last_error()
    assert message.startswith("ctxc_manager_create: ")
    assert "page_size" in message


def test_struct_size_too_small_is_refused():
    options = _options()
    options.struct_size = 4
    out = ffi.new("ctxc_manager_t **")
    assert lib.ctxc_manager_create(options, out) == lib.CTXC_E_INVALID_ARGUMENT
    assert "struct_size" in _ffi.last_error()
    assert out[0] == ffi.NULL


# The structs without struct_size: small values used in arrays or embedded, frozen by static_assert in the library.
FROZEN_STRUCTS = {
    "ctxc_hash128_t", "ctxc_resource_demand_t", "ctxc_media_span_key_t", "ctxc_block_key_extras_t",
    "ctxc_hybrid_candidate_t", "ctxc_hybrid_snapshot_reservation_t", "ctxc_hybrid_checkpoint_key_t",
    "ctxc_kv_layer_shape_t", "ctxc_reuse_plan_t", "ctxc_resident_ref_t", "ctxc_kv_headroom_t", "ctxc_media_item_t",
    "ctxc_sequence_request_t", "ctxc_tensor_view_t", "ctxc_sim_request_t", "ctxc_kv_event_t",
    "ctxc_kv_event_extra_key_t", "ctxc_kv_event_media_t", "ctxc_retention_range_t",
}


@pytest.mark.parametrize("name", HEADER_STRUCTS)
def test_every_struct_can_grow_or_is_frozen(name):
    fields = [field for field, _ in ffi.typeof(name).fields]
    if name in FROZEN_STRUCTS:
        assert "struct_size" not in fields
    else:
        assert fields[0] == "struct_size", f"{name} neither starts with struct_size nor is listed as frozen"


def _output_struct_calls(manager, backend):
    """Each call that fills an output struct, as (struct type, call taking the struct pointer)."""
    return [
        ("ctxc_manager_metrics_t", lambda out: lib.ctxc_manager_metrics(manager, out)),
        ("ctxc_record_view_t", lambda out: lib.ctxc_debug_manager_record(manager, 1, out)),
        ("ctxc_acquire_result_t", lambda out: lib.ctxc_manager_acquire_vanilla(
            manager, ffi.NULL, 0, 0, 0, out, ffi.new("ctxc_lease_t **"))),
        ("ctxc_launch_counters_t", lambda out: lib.ctxc_device_backend_counters(backend, out)),
    ]


def test_output_structs_with_a_short_struct_size_are_refused_and_left_alone():
    out = ffi.new("ctxc_manager_t **")
    assert lib.ctxc_manager_create(_options(), out) == lib.CTXC_OK
    options = ffi.new("ctxc_device_backend_options_t *")
    lib.ctxc_device_backend_options_init(options)
    options.kind = lib.CTXC_BACKEND_CPU
    backend = ffi.new("ctxc_device_backend_t **")
    assert lib.ctxc_device_backend_create(options, backend) == lib.CTXC_OK
    try:
        for ctype, call in _output_struct_calls(out[0], backend[0]):
            struct = ffi.new(ctype + " *")
            struct.struct_size = ffi.sizeof(ctype) - 1
            assert call(struct) == lib.CTXC_E_INVALID_ARGUMENT, ctype
            assert "struct_size" in _ffi.last_error()
            assert struct.struct_size == ffi.sizeof(ctype) - 1
    finally:
        assert lib.ctxc_device_backend_destroy(backend[0]) == lib.CTXC_OK
        assert lib.ctxc_manager_destroy(out[0]) == lib.CTXC_OK


def test_raw_handles_are_checked_not_dereferenced():
    out = ffi.new("ctxc_manager_t **")
    assert lib.ctxc_manager_create(_options(), out) == lib.CTXC_OK
    manager = out[0]
    try:
        result = ffi.new("ctxc_acquire_result_t *")
        result.struct_size = ffi.sizeof("ctxc_acquire_result_t")
        lease_out = ffi.new("ctxc_lease_t **")
        assert lib.ctxc_manager_acquire_vanilla(manager, ffi.NULL, 0, 5, 0, result, lease_out) == lib.CTXC_OK
        lease = lease_out[0]
        assert result.status == lib.CTXC_ACQUIRE_ACQUIRED and result.plan.demand.base_kv_pages == 2

        made_up = ffi.cast("ctxc_lease_t *", 0x12345600 | 0xC2)
        wrong_type = ffi.cast("ctxc_lease_t *", manager)  # a manager handle used as a lease
        pages = ffi.new("const int32_t **")
        count = ffi.new("size_t *")
        for bad in (ffi.NULL, made_up, wrong_type):
            assert lib.ctxc_lease_base_pages(bad, pages, count) == lib.CTXC_E_INVALID_HANDLE
        assert lib.ctxc_manager_check_invariants(ffi.cast("ctxc_manager_t *", lease)) == lib.CTXC_E_INVALID_HANDLE

        assert lib.ctxc_lease_base_pages(lease, pages, count) == lib.CTXC_OK
        assert [pages[0][i] for i in range(count[0])] == [0, 1]
        assert lib.ctxc_lease_release(lease) == lib.CTXC_OK
        assert lib.ctxc_lease_release(lease) == lib.CTXC_E_INVALID_HANDLE  # double release
        assert lib.ctxc_lease_destroy(lease) == lib.CTXC_OK
        assert lib.ctxc_lease_destroy(lease) == lib.CTXC_E_INVALID_HANDLE  # stale
        assert lib.ctxc_lease_destroy(ffi.NULL) == lib.CTXC_OK
        assert lib.ctxc_manager_check_invariants(manager) == lib.CTXC_OK
    finally:
        assert lib.ctxc_manager_destroy(manager) == lib.CTXC_OK
    assert lib.ctxc_manager_destroy(manager) == lib.CTXC_E_INVALID_HANDLE
    assert lib.ctxc_manager_destroy(ffi.NULL) == lib.CTXC_OK


def test_null_out_pointers_are_invalid_arguments():
    out = ffi.new("ctxc_manager_t **")
    assert lib.ctxc_manager_create(_options(), out) == lib.CTXC_OK
    manager = out[0]
    try:
        result = ffi.new("ctxc_acquire_result_t *")
        result.struct_size = ffi.sizeof("ctxc_acquire_result_t")
        assert lib.ctxc_manager_acquire_vanilla(manager, ffi.NULL, 0, 5, 0, result, ffi.NULL) == lib.CTXC_E_INVALID_ARGUMENT
        assert lib.ctxc_manager_acquire_vanilla(manager, ffi.NULL, 0, 5, 0, ffi.NULL,
                                                ffi.new("ctxc_lease_t **")) == lib.CTXC_E_INVALID_ARGUMENT
        # A NULL hash array with a non-zero count.
        assert lib.ctxc_manager_acquire_vanilla(manager, ffi.NULL, 1, 5, 0, result,
                                                ffi.new("ctxc_lease_t **")) == lib.CTXC_E_INVALID_ARGUMENT
        live = ffi.new("size_t *")
        assert lib.ctxc_manager_live_lease_count(manager, live) == lib.CTXC_OK and live[0] == 0
        assert lib.ctxc_manager_check_invariants(manager) == lib.CTXC_OK
    finally:
        assert lib.ctxc_manager_destroy(manager) == lib.CTXC_OK


def test_two_call_pattern_reports_the_size_needed():
    tokens = np.arange(12, dtype=np.int32)
    count = ffi.new("size_t *")
    tokens_ptr = ffi.cast("const int32_t *", ffi.from_buffer(tokens))
    status = lib.ctxc_hash_full_blocks(ffi.NULL, tokens_ptr, 12, 4, ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, count)
    assert status == lib.CTXC_E_BUFFER_TOO_SMALL and count[0] == 3
    short = ffi.new("ctxc_hash128_t[]", 2)
    status = lib.ctxc_hash_full_blocks(ffi.NULL, tokens_ptr, 12, 4, ffi.NULL, 0, ffi.NULL, short, 2, count)
    assert status == lib.CTXC_E_BUFFER_TOO_SMALL and count[0] == 3
    with pytest.raises(ctxcache.BufferTooSmallError, match="out_hashes"):
        _ffi.check(status)
    full = ffi.new("ctxc_hash128_t[]", 3)
    assert lib.ctxc_hash_full_blocks(ffi.NULL, tokens_ptr, 12, 4, ffi.NULL, 0, ffi.NULL, full, 3, count) == 0
    expected = ctxcache.hash_full_blocks(tokens, 4)
    assert [(full[i].hi, full[i].lo) for i in range(3)] == [tuple(int(x) for x in row) for row in expected]


@pytest.mark.parametrize("function", ["ctxc_hash_full_blocks", "ctxc_hash_exact_prefix"])
def test_extras_count_mismatch_is_an_invalid_argument(function):
    tokens = np.arange(12, dtype=np.int32)  # 3 blocks of 4
    tokens_ptr = ffi.cast("const int32_t *", ffi.from_buffer(tokens))
    extras = ffi.new("ctxc_block_key_extras_t[]", 2)
    out = ffi.new("ctxc_hash128_t[]", 3)
    if function == "ctxc_hash_full_blocks":
        status = lib.ctxc_hash_full_blocks(ffi.NULL, tokens_ptr, 12, 4, extras, 2, ffi.NULL, out, 3, ffi.new("size_t *"))
    else:
        status = lib.ctxc_hash_exact_prefix(ffi.NULL, tokens_ptr, 12, 4, extras, 2, ffi.NULL, out)
    assert status == lib.CTXC_E_INVALID_ARGUMENT
    assert _ffi.last_error().startswith(function + ": extras_count is 2 for 3 blocks")


def test_last_error_is_never_null():
    assert lib.ctxc_last_error() != ffi.NULL
    assert isinstance(_ffi.last_error(), str)


# ---- CUDA probe -------------------------------------------------------------------------------------------------


def _nvcc_available() -> bool:
    return shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists()


def test_cuda_compiled_whenever_nvcc_exists():
    # DESIGN section 9: CUDA is compiled whenever nvcc exists (CTXCACHE_ENABLE_CUDA=OFF opts out).
    if os.environ.get("CTXCACHE_ENABLE_CUDA", "AUTO").upper() == "OFF":
        pytest.skip("CTXCACHE_ENABLE_CUDA=OFF")
    if not _nvcc_available():
        pytest.skip("no nvcc on this machine")
    assert ctxcache.cuda_compiled() is True


def test_cuda_device_count_without_a_device_says_why():
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has an NVIDIA device node")
    count = ctxcache.cuda_device_count()
    assert count <= 0
    reason = _ffi.last_error()
    assert reason.startswith("ctxc_cuda_device_count: ")
    assert len(reason) > len("ctxc_cuda_device_count: ")
    if not ctxcache.cuda_compiled():
        assert count == -1


@pytest.mark.gpu
def test_cuda_device_is_visible():
    assert ctxcache.cuda_compiled() is True
    assert ctxcache.cuda_device_count() > 0


_GPU_PROBE_TEST = textwrap.dedent(
    """
    import pytest

    @pytest.mark.gpu
    def test_needs_gpu():
        pass
    """
)


def _run_marked_test(pytester, monkeypatch, require: str | None):
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a CUDA device\n")
    pytester.makepyfile(test_marker=_GPU_PROBE_TEST)
    if require is None:
        monkeypatch.delenv("CTXCACHE_REQUIRE_GPU", raising=False)
    else:
        monkeypatch.setenv("CTXCACHE_REQUIRE_GPU", require)
    return pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")


def test_gpu_marker_skips_with_the_probe_reason(pytester, monkeypatch):
    if ctxcache.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    reason = _ffi.last_error()
    result = _run_marked_test(pytester, monkeypatch, None)
    result.assert_outcomes(skipped=1)
    escaped = "".join(f"[{c}]" if c in "*?[" else c for c in reason)  # fnmatch metacharacters
    result.stdout.fnmatch_lines([f"*no CUDA device: {escaped}*"])


def test_require_gpu_turns_the_skip_into_a_failure(pytester, monkeypatch):
    if ctxcache.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    result = _run_marked_test(pytester, monkeypatch, "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CTXCACHE_REQUIRE_GPU=1*no CUDA device*"])


# ---- the transformers extra: a skip with the reason, or a failure under CTXCACHE_REQUIRE_TRANSFORMERS=1 ----------


def _run_integration_without_torch(pytester, monkeypatch, require: str | None):
    """The integration test module, run where `import torch` fails (a torch.py that raises shadows the real one)."""
    pytester.makepyfile(torch="raise ImportError('torch blocked by the test')")
    source = Path(__file__).with_name("test_transformers_integration.py").read_text()
    pytester.makepyfile(test_integration=source)
    if require is None:
        monkeypatch.delenv("CTXCACHE_REQUIRE_TRANSFORMERS", raising=False)
    else:
        monkeypatch.setenv("CTXCACHE_REQUIRE_TRANSFORMERS", require)
    return pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")


def test_transformers_tests_skip_with_the_reason_when_the_extra_is_missing(pytester, monkeypatch):
    result = _run_integration_without_torch(pytester, monkeypatch, None)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the transformers extra is not installed (torch blocked by the test)*"])


def test_require_transformers_turns_the_skip_into_a_failure(pytester, monkeypatch):
    result = _run_integration_without_torch(pytester, monkeypatch, "1")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*CTXCACHE_REQUIRE_TRANSFORMERS=1 but the transformers extra is missing*"])
