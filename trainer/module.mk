# trainer/: CUDA sources compile only when nvcc is found (CUDA_HOME or PATH); host parts always.
TRAINER_CU := $(wildcard trainer/*.cu)
ifneq ($(NVCC),)
TRAINER_CU_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(TRAINER_CU))
all: $(TRAINER_CU_OBJ)
$(BUILD)/obj/%.cu.o: %.cu | $(DEPS_STAMP)
	$(Q)mkdir -p $(@D)
	$(if $(Q),@echo "  NVCC    $<")
	$(Q)$(NVCC) -std=c++17 -O2 -I. -Xcompiler -Wall,-Wextra -c $< -o $@
endif
