"""Stage 3, op to TIR choices: conv maps (Winograd, banded and grouped convs) and the LLVM math rules."""
