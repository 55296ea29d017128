// Small helpers shared by the Studio's pages: DOM building, JSON fetching, polling, charts (uPlot).
const studio = {};

studio.el = function (tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
};

studio.getJSON = async function (url, options) {
  const response = await fetch(url, options);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
};

studio.postJSON = function (url, body) {
  return fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
};

// Calls `refresh` every `interval` ms while it returns true; one slow poll a while after it returns false.
studio.poll = async function (refresh, interval) {
  let keepGoing = true;
  try { keepGoing = await refresh(); } catch (error) { console.error(error); }
  setTimeout(() => studio.poll(refresh, interval), keepGoing ? interval : interval * 5);
};

studio.ago = function (seconds) {
  if (!seconds) return "–";
  const delta = Math.max(0, Date.now() / 1000 - seconds);
  if (delta < 90) return `${Math.round(delta)} s ago`;
  if (delta < 5400) return `${Math.round(delta / 60)} min ago`;
  if (delta < 129600) return `${Math.round(delta / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleString();
};

studio.progressBar = function (label, step, total) {
  const fraction = total ? Math.min(1, step / total) : 0;
  return studio.el("div", {class: "progress"},
    studio.el("span", {class: "label"}, label),
    studio.el("span", {class: "bar"}, studio.el("span", {class: "fill", style: `width:${(fraction * 100).toFixed(1)}%`})),
    studio.el("span", {class: "count"}, total ? `${step} / ${total}` : `${step} steps`));
};

// Steps are whole numbers: ticks never fall between two of them.
const STEP_INCREMENTS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];
const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

// Lines with their own steps -> uPlot's aligned columns [steps, values of line 1, ...] (null where absent).
studio.align = function (lines) {
  const steps = [...new Set(lines.flatMap(line => line.steps))].sort((a, b) => a - b);
  const index = new Map(steps.map((step, position) => [step, position]));
  const columns = lines.map(line => {
    const column = new Array(steps.length).fill(null);
    line.steps.forEach((step, position) => { column[index.get(step)] = line.values[position]; });
    return column;
  });
  return [steps, ...columns];
};

// A grid of charts, one per chart entry of /api/metrics or /api/compare, updated in place.
studio.ChartBoard = class {
  constructor(container) { this.container = container; this.charts = new Map(); }

  update(charts) {
    for (const chart of charts) {
      const labels = chart.lines.map(line => line.label).join("|");
      const data = studio.align(chart.lines);
      const points = chart.lines.reduce((sum, line) => sum + line.values.length, 0);
      let entry = this.charts.get(chart.name);
      if (entry && entry.labels !== labels) { entry.plot.destroy(); entry.box.remove(); entry = null; }
      if (!entry) entry = this.create(chart, labels, data);
      else entry.plot.setData(data);
      entry.box.dataset.points = points;
      entry.box.dataset.lastStep = data[0].length ? data[0][data[0].length - 1] : "";
    }
  }

  create(chart, labels, data) {
    const box = studio.el("div", {class: "chart", "data-chart": chart.name});
    box.append(studio.el("h3", {}, chart.title));
    this.container.append(box);
    const width = Math.max(320, Math.min(560, this.container.clientWidth / 2 - 24));
    const options = {
      width: width, height: 240,
      scales: {x: {time: false}},
      axes: [{label: "step", incrs: STEP_INCREMENTS}, {label: chart.y_label, size: 60}],
      series: [{label: "step"}, ...chart.lines.map((line, position) => ({
        label: line.label, stroke: PALETTE[position % PALETTE.length], width: 2, spanGaps: true,
        points: {show: line.values.length <= 40, size: 5},
      }))],
      legend: {live: true},
    };
    const entry = {box: box, labels: labels, plot: new uPlot(options, data, box)};
    this.charts.set(chart.name, entry);
    return entry;
  }
};
