"""How fedrun's compiled kernels are named and what a failed build says (fedrun/native.py)."""

from fedrun import native


def test_a_failed_builds_reason_is_the_line_that_says_why():
    ninja_output = ("Error building extension 'x': [1/2] /opt/g++ -MMD -MF k.o.d -fPIC -c k.cpp -o k.o\n"
                    "FAILED: k.o\n/opt/g++ -MMD -MF k.o.d -fPIC -c k.cpp -o k.o\n/bin/sh: 1: /opt/g++: not found\n"
                    "ninja: build stopped: subcommand failed.\n")
    assert native.build_failure(RuntimeError(ninja_output)) == "/bin/sh: 1: /opt/g++: not found"
    compile_error = ninja_output.replace("/bin/sh: 1: /opt/g++: not found",
                                         "In file included from k.cpp:1:\nk.cpp:9:3: error: 'vf' was not declared")
    assert native.build_failure(RuntimeError(compile_error)) == "k.cpp:9:3: error: 'vf' was not declared"
    assert native.build_failure(OSError("ninja is required")) == "ninja is required"


def test_a_build_is_named_by_its_source_its_place_and_the_cpu(monkeypatch, tmp_path):
    """One build per source text, checkout (torch's build files name the source's path) and CPU: a copy of the
    source elsewhere or another CPU's instruction sets get a build of their own, the same ones the same name; each
    kernel its own."""
    source = native.KERNELS / "conv_pool_relu.cpp"
    name = native.build_name(source)
    assert name == native.build_name(source) and name.startswith("fedrun_conv_pool_relu_")
    assert native.build_name(native.KERNELS / "indexed_linear.cpp").startswith("fedrun_indexed_linear_")
    assert set(native.SOURCES) == {p.name for p in native.KERNELS.glob("*.cpp")}  # each kernel says what it is
    copy = tmp_path / "kernels" / source.name
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes())
    elsewhere = native.build_name(copy)
    assert elsewhere != name
    copy.write_text(copy.read_text() + "\n// edited\n")
    assert native.build_name(copy) not in (name, elsewhere)
    monkeypatch.setattr(native, "_cpu_signature", lambda: "x86_64 flags: avx2 torch 2.14.1")
    assert native.build_name(source) not in (name, elsewhere)


def test_building_all_kernels_reports_each_one_and_a_missing_compiler(without_a_compiler):
    """``python -m fedrun.native`` (``make setup``) builds every kernel at once and says which are there: all of them
    here, none where the compiler is missing (each build fails as without g++)."""
    assert native.build_all() == {source: True for source in native.SOURCES}
    with without_a_compiler():
        assert native.build_all() == {source: False for source in native.SOURCES}
