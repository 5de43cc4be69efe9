"""The numeric precisions a command may be asked for, by name: shared by the recipe layer (which imports no torch)
and the runtime (which turns a name into a dtype and an autocast), so that neither imports the other."""

PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # training's, and every command's
TRANSLATE_PRECISIONS = (*PRECISIONS, "int8")  # translation's: and int8 (CPU: quantized linear layers)
