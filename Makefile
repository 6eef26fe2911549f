# Keel's build entry. `make help` lists the targets.
#
#   make quickstart   set up, build what the example uses, run it with an approval
#   make test         set up, build every plugin, run every test
#   make e2e-model    the LLM example against a real model (not in test)
#   make postgres     start the private PostgreSQL cluster, print its URL
#
# Plugins of every language land in target/plugins/. Rebuilds are
# incremental: cargo for Rust, file dates for C, Python and JavaScript.

SHELL := /bin/bash
OUT := target/plugins
WIT := wit/keel.wit

RUST_PLUGINS := agent-scripted agent-llm policy-rules tool-echo tool-fs
RUST_OUT := $(RUST_PLUGINS:%=$(OUT)/%-rust.wasm) $(OUT)/hostile-agent-rust.wasm $(OUT)/hostile-tool-rust.wasm
OTHER_OUT := $(OUT)/policy-rules-c.wasm \
             $(OUT)/policy-rules-py.wasm $(OUT)/agent-scripted-py.wasm \
             $(OUT)/policy-rules-js.wasm $(OUT)/agent-scripted-js.wasm

.PHONY: postgres help setup setup-rust test-setup plugins rust-plugins quickstart-plugins test quickstart e2e-model check-bindings clean-plugins FORCE

help:
	@sed -n 's/^#   //p' Makefile

setup:
	@scripts/setup.sh

# Only what Rust guests need: the quickstart builds no other language.
setup-rust:
	@scripts/setup.sh --rust

# The real servers the tests run against (LiteLLM's proxy).
test-setup:
	@scripts/setup.sh --test

plugins: setup rust-plugins $(OTHER_OUT)
	@ls -1 $(OUT)

# cargo decides what is stale; each guest is its own build so that the SDK's
# world features are not unified across plugins.
rust-plugins: $(RUST_OUT)
$(OUT)/%-rust.wasm: FORCE
	@scripts/build-rust-guest.sh $* $@

C_SDK := $(wildcard guest-sdk/c/*.[ch] guest-sdk/c/gen/*) guest-sdk/c/build.sh
$(OUT)/policy-rules-c.wasm: $(WIT) $(wildcard plugins/policy-rules/c/*.[ch]) plugins/policy-rules/c/build.sh $(C_SDK) $(wildcard xtask/src/*.rs)
	@mkdir -p $(OUT) && plugins/policy-rules/c/build.sh $@

PY_SDK := $(wildcard guest-sdk/python/keel_guest/*.py) guest-sdk/python/build.sh
$(OUT)/%-py.wasm: $(WIT) $(wildcard plugins/%/python/*.py) plugins/%/python/build.sh $(PY_SDK)
	@mkdir -p $(OUT) && plugins/$*/python/build.sh $@

JS_SDK := $(wildcard guest-sdk/js/src/*.js guest-sdk/js/src/component/*.js) guest-sdk/js/build.sh
$(OUT)/%-js.wasm: $(WIT) $(wildcard plugins/%/js/*.js) plugins/%/js/build.sh scripts/js/package-lock.json $(JS_SDK)
	@mkdir -p $(OUT) && plugins/$*/js/build.sh $@

# Make cannot expand % inside wildcard in prerequisites; spell them out.
$(OUT)/policy-rules-py.wasm: $(wildcard plugins/policy-rules/python/*.py)
$(OUT)/agent-scripted-py.wasm: $(wildcard plugins/agent-scripted/python/*.py)
$(OUT)/policy-rules-js.wasm: $(wildcard plugins/policy-rules/js/*.js)
$(OUT)/agent-scripted-js.wasm: $(wildcard plugins/agent-scripted/js/*.js)

check-bindings:
	@$(foreach w,agent policy tool,cargo run -q -p xtask -- c-bindings --wit wit --world $(w) --out guest-sdk/c/gen --check &&) true

FORCE:

test: test-setup plugins check-bindings
	PYTHONPATH=guest-sdk/python python3 -m unittest discover -s guest-sdk/python/tests
	PYTHONPATH=guest-sdk/python python3 -m unittest discover -s plugins/policy-rules/python
	PYTHONPATH=guest-sdk/python python3 -m unittest discover -s plugins/agent-scripted/python
	node --test guest-sdk/js/test plugins/policy-rules/js plugins/agent-scripted/js
	guest-sdk/c/test.sh
	plugins/policy-rules/c/test.sh
	scripts/bench-ab.sh --self-test
	@# The second store engine: every engine test also runs on PostgreSQL.
	scripts/postgres.sh start >/dev/null
	KEEL_PLUGINS=$(CURDIR)/$(OUT) cargo test --workspace --exclude hostile-agent --exclude hostile-tool $(foreach p,$(RUST_PLUGINS),--exclude $(p)) --exclude xtask
	cargo test -q -p keel-guest --all-features
	cargo test -q -p keel-benches --benches --no-run
	$(foreach p,$(RUST_PLUGINS),cargo test -q -p $(p) &&) true
	cargo run -q -p keel-embed-example -- $(OUT)

postgres:
	@scripts/postgres.sh start

# The quickstart builds only what it loads: three Rust components and the
# keel binary. Each long step says so first; cargo shows its own progress.
QUICKSTART_OUT := $(OUT)/agent-scripted-rust.wasm $(OUT)/policy-rules-rust.wasm $(OUT)/tool-fs-rust.wasm
quickstart-plugins: setup-rust
	@ls $(QUICKSTART_OUT) >/dev/null 2>&1 || echo "quickstart: building the agent, policy and tool components (the first time about two and a half minutes on two cores)"
	@$(MAKE) -s $(QUICKSTART_OUT)

quickstart: quickstart-plugins
	@[ -x target/debug/keel ] || echo "quickstart: building the keel binary (the first time about six and a half minutes on two cores, seconds after)"
	@cargo build -p keel
	@examples/quickstart/run.sh

# llama-cpp-python's server with Gemma 3 270M; the first run builds
# llama.cpp (over half an hour), see the script.
e2e-model:
	@scripts/e2e-model.sh

clean-plugins:
	rm -rf $(OUT)
