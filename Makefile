# Build helpers that cargo does not cover. `make bpf` regenerates the committed BPF object so
# that `cargo build` never needs clang; `make bpf-check` verifies the committed object matches
# its source (CI runs it).

BPF_DIR := crates/ebpf/bpf
BPF_SRC := $(BPF_DIR)/kepler.bpf.c $(BPF_DIR)/kernel_types.h
BPF_OBJ := $(BPF_DIR)/kepler.bpf.o
CLANG ?= clang
LLVM_STRIP ?= llvm-strip
ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
MULTIARCH_INC := /usr/include/$(shell uname -m)-linux-gnu
# -g makes clang emit the BTF that CO-RE needs; the DWARF it also emits is stripped afterwards
# (it carries absolute paths, which would make the object differ between checkouts).
BPF_CFLAGS := -O2 -g -target bpf -D__TARGET_ARCH_$(ARCH) -I. -I$(MULTIARCH_INC) \
	-Wall -Werror -fno-ident

.PHONY: bpf bpf-check

bpf: $(BPF_OBJ)

# Compiled from inside the directory, with the directory mapped to `.`, so that the file names
# recorded in BTF line info are relative and the bytes do not depend on where the repository is checked out.
$(BPF_OBJ): $(BPF_SRC) Makefile
	cd $(BPF_DIR) && $(CLANG) $(BPF_CFLAGS) -fdebug-prefix-map=$$(pwd)=. -c kepler.bpf.c -o kepler.bpf.o.tmp
	cd $(BPF_DIR) && $(LLVM_STRIP) -g kepler.bpf.o.tmp && mv kepler.bpf.o.tmp kepler.bpf.o
	$(CLANG) --version | head -n 1 > $(BPF_OBJ).clang-version

bpf-check:
	crates/ebpf/scripts/check-bpf-object.sh
