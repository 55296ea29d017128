// The config builder: fields generated from the schema (/api/config/fields), checked live by
// /api/config/check (the project's own loader, resolver, validator and plan), downloaded or started.
(async function () {
  const meta = await studio.getJSON("/api/config/fields");
  const fields = new Map(meta.fields.map(field => [field.key, field]));
  const values = Object.assign({}, meta.starting_values);
  let mode = "beginner";
  let timer = null;
  let checkNumber = 0;

  function input(field) {
    const value = values[field.key] ?? "";
    let control;
    if (field.kind === "choice" || field.kind === "bool") {
      const options = field.kind === "bool" ? ["true", "false"] : field.choices;
      control = studio.el("select", {},
        studio.el("option", {value: ""}, `(default: ${field.default || "null"})`),
        ...options.map(option => studio.el("option", {value: option}, option)));
      control.value = value;
    } else if (field.kind === "yaml") {
      control = studio.el("textarea", {rows: 2, placeholder: field.default || "null", spellcheck: "false"});
      control.value = value;
    } else {
      control = studio.el("input", {type: "text", placeholder: field.default || (field.required ? "required" : "null"), spellcheck: "false"});
      control.value = value;
    }
    control.name = field.key;
    control.id = "field-" + field.key;
    control.addEventListener("input", () => { values[field.key] = control.value; scheduleCheck(); });
    return control;
  }

  function row(field) {
    const label = studio.el("label", {for: "field-" + field.key, class: "key"}, field.key, field.required ? studio.el("span", {class: "required"}, " *") : "");
    const help = studio.el("div", {class: "help"}, field.help + (field.choices.length && field.kind !== "choice" ? ` (${field.choices.join(", ")}, or a dotted path)` : ""));
    const message = studio.el("div", {class: "message", "data-message-for": field.key});
    return studio.el("div", {class: "field", "data-key": field.key}, label, input(field), help, message);
  }

  function render() {
    const form = document.getElementById("form");
    form.replaceChildren();
    if (mode === "beginner") {
      form.append(studio.el("p", {class: "muted"}, "The keys a first run needs. Everything else keeps its default; the Expert tab shows every key."));
      for (const key of meta.beginner_keys) form.append(row(fields.get(key)));
    } else {
      const sections = new Map();
      for (const field of meta.fields) {
        const name = field.section || "top level";
        if (!sections.has(name)) sections.set(name, []);
        sections.get(name).push(field);
      }
      for (const [name, list] of sections) {
        const set = studio.el("details", {class: "section", "data-section": name}, studio.el("summary", {}, `${name} (${list.length} keys)`));
        for (const field of list) set.append(row(field));
        if (name === "top level") set.open = true;
        form.append(set);
      }
    }
    scheduleCheck(0);
  }

  function scheduleCheck(delay = 300) {
    clearTimeout(timer);
    timer = setTimeout(check, delay);
  }

  function fieldFor(key) {
    // Problems may name a derived spelling (a taskset becomes tasksets[0]) or a key inside a mapping.
    const candidates = [key, key.replace("tasksets[0]", "taskset")];
    for (const candidate of candidates) {
      let probe = candidate;
      while (probe) {
        if (document.querySelector(`[data-message-for="${CSS.escape(probe)}"]`)) return probe;
        probe = probe.includes(".") ? probe.slice(0, probe.lastIndexOf(".")) : "";
      }
    }
    return null;
  }

  async function check() {
    const number = ++checkNumber;
    const response = await studio.postJSON("/api/config/check", {values: values});
    if (number !== checkNumber) return;  // a newer check is under way
    const result = await response.json();
    document.querySelectorAll("[data-message-for]").forEach(node => { node.textContent = ""; });
    document.querySelectorAll(".field.invalid").forEach(node => node.classList.remove("invalid"));
    const general = [];
    for (const problem of result.problems) {
      const key = fieldFor(problem.key);
      if (key) {
        const node = document.querySelector(`[data-message-for="${CSS.escape(key)}"]`);
        node.textContent = (node.textContent ? node.textContent + " " : "") + (key === problem.key ? "" : `${problem.key}: `) + problem.message;
        node.closest(".field").classList.add("invalid");
      }
      general.push(problem);
    }
    const validity = document.getElementById("validity");
    validity.textContent = result.valid ? "valid: `trivium plan` accepts this config" : `${result.problems.length} problem(s)`;
    validity.className = "validity " + (result.valid ? "ok" : "bad");
    document.getElementById("problems").replaceChildren(...general.map(p => studio.el("li", {}, studio.el("code", {}, p.key || "config"), " ", p.message)));
    document.getElementById("notes").replaceChildren(...result.notes.map(note => studio.el("li", {}, note)));
    document.getElementById("yaml").textContent = result.yaml;
    document.getElementById("plan").textContent = result.plans.map(plan => plan.text).join("\n\n");
    renderArithmetic(result.plans);
    document.getElementById("start").disabled = !result.valid;
  }

  function renderArithmetic(plans) {
    const box = document.getElementById("arithmetic");
    const warnings = document.getElementById("warnings");
    box.replaceChildren(); warnings.replaceChildren();
    if (!plans.length) { box.append(studio.el("p", {class: "muted"}, "shown once the config is valid")); return; }
    for (const plan of plans) {
      const lines = [];
      if (plan.stage) lines.push(studio.el("div", {class: "stage"}, `stage ${plan.stage}`));
      if (plan.supply_per_step !== null) lines.push(studio.el("div", {"data-fact": "supply"}, `explorer supplies ${plan.supply_per_step} experiences per step`));
      lines.push(studio.el("div", {"data-fact": "demand"}, `trainer takes ${plan.train_batch_size} experiences per step`));
      lines.push(studio.el("div", {"data-fact": "steps"}, `explorer steps: ${plan.explorer_steps ?? "unknown"} · trainer steps: ${plan.trainer_steps ?? "–"}`));
      box.append(studio.el("div", {class: "plan"}, ...lines));
      for (const warning of plan.warnings) warnings.append(studio.el("li", {}, (plan.stage ? `${plan.stage}: ` : "") + warning));
    }
  }

  document.getElementById("download").onclick = async () => {
    const response = await studio.postJSON("/api/config/yaml", {values: values});
    const blob = await response.blob();
    const name = (response.headers.get("Content-Disposition") || "").match(/filename="([^"]+)"/);
    const link = studio.el("a", {href: URL.createObjectURL(blob), download: name ? name[1] : "config.yaml"});
    document.body.append(link); link.click(); link.remove();
  };

  document.getElementById("start").onclick = async () => {
    const message = document.getElementById("start-message");
    message.textContent = "starting…";
    const response = await studio.postJSON("/api/runs/start", {values: values});
    const result = await response.json();
    if (!response.ok) {
      message.textContent = "not started: " + (result.problems || []).map(p => `${p.key}: ${p.message}`).join("; ");
      return;
    }
    if (result.run_id) location.href = `/run/${result.run_id}`;
    else message.textContent = `started in ${result.run_dir} (outside the Studio's runs folder); output in ${result.output}`;
  };

  for (const tab of document.querySelectorAll(".tab")) {
    tab.onclick = () => {
      mode = tab.dataset.mode;
      document.querySelectorAll(".tab").forEach(other => other.classList.toggle("active", other === tab));
      render();
    };
  }
  render();
})();
