"""The composite action's step (action.yml): inputs in, one kl-bitexact command, outputs out.

`inputs` reads and checks the INPUT_* variables action.yml forwards, `argv` turns them into
a command line, `shards` finds the shards' results (and reports the missing ones), `outputs`
writes step outputs and the job summary. `commands/action.py` wires them together.
"""
