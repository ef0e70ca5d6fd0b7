# trainer/: the per-GPU trainer. Host parts always build (MPI, OpenBLAS); the CUDA device layer
# and the NCCL backend (*.cu) build when nvcc is found (CUDA_HOME or PATH), else nocuda.c stands
# in and says so at run time. build/bin/trainer is trainer/main.c + libtrainer.a.
# MPI flags are recursive (=) on purpose: pkg-config must run after scripts/deps.sh installed it.
MPI_CFLAGS = $(shell pkg-config --cflags ompi-c)
MPI_LIBS = $(shell pkg-config --libs ompi-c)
TRN_SYSLIBS = $(MPI_LIBS) -lopenblas $(S3_SYSLIBS)
TRAINER_C := $(filter-out trainer/main.c trainer/nocuda.c,$(wildcard trainer/*.c))
TRAINER_CU := $(wildcard trainer/*.cu)

$(BUILD)/obj/trainer/%.o: override CFLAGS += $(MPI_CFLAGS)
$(BUILD)/obj/tests/test_trn_%.o: override CFLAGS += $(MPI_CFLAGS)

ifneq ($(and $(NVCC),$(TRAINER_CU)),)
TRAINER_GPU_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(TRAINER_CU))
TRN_SYSLIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lnccl -lstdc++
$(BUILD)/obj/%.cu.o: %.cu | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC    $<")
	$(Q)$(NVCC) -std=c++17 -O2 -arch=sm_90 -I. $(MPI_CFLAGS) -Xcompiler -Wall,-Wextra -MMD -MP -c $< -o $@
# flags live here: objects compiled with older ones (e.g. without -arch=sm_90) are rebuilt
$(TRAINER_GPU_OBJ): trainer/module.mk
else
TRAINER_GPU_OBJ := $(BUILD)/obj/trainer/nocuda.o
endif

ifneq ($(TRAINER_C),)
$(BUILD)/lib/libtrainer.a: $(patsubst %.c,$(BUILD)/obj/%.o,$(TRAINER_C)) $(TRAINER_GPU_OBJ)
TRN_LIB := $(BUILD)/lib/libtrainer.a
endif

ifneq ($(wildcard trainer/main.c),)
BINS += $(BUILD)/bin/trainer
$(BUILD)/bin/trainer: $(BUILD)/obj/trainer/main.o $(TRN_LIB) $(LIBS)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(TRN_LIB) $(LINKLIBS) $(SYSLIBS) $(TRN_SYSLIBS)
endif
