// genembed page: embed typed texts through /v1/embeddings, draw their cosine similarity matrix,
// and show the top tokens of each GIRCSE soft token through /v1/inspect. No build step, no libraries.
"use strict";

const $ = (id) => document.getElementById(id);

function requestHeaders() {
  const headers = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

async function post(path, body) {
  const response = await fetch(path, { method: "POST", headers: requestHeaders(), body: JSON.stringify(body) });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = data.error && data.error.message ? data.error.message : "HTTP " + response.status;
    throw new Error(message);
  }
  return data;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function readTexts() {
  return $("texts").value.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
}

function options() {
  const body = {};
  const instruction = $("instruction").value.trim();
  if (instruction) body.instruction = instruction;
  const steps = parseInt($("steps").value, 10);
  if (Number.isFinite(steps) && steps >= 1) body.steps = steps;
  return body;
}

function cosineMatrix(vectors) {
  const unit = vectors.map((v) => {
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0)) || 1;
    return v.map((x) => x / norm);
  });
  return unit.map((a) => unit.map((b) => a.reduce((s, x, i) => s + x * b[i], 0)));
}

// Colour from white (the lowest similarity among different texts) to red (1.0): embedding cosines
// of one model often sit in a narrow band, so a fixed -1..1 scale would paint every cell alike.
function cellColour(value, low) {
  const span = 1 - low > 1e-6 ? 1 - low : 1;
  const t = Math.max(0, Math.min(1, (value - low) / span));
  const mix = (from, to) => Math.round(from + (to - from) * t);
  return `rgb(${mix(255, 214)}, ${mix(255, 48)}, ${mix(255, 49)})`;
}

function lowestOffDiagonal(matrix) {
  let low = 1;
  matrix.forEach((row, i) => row.forEach((v, j) => { if (i !== j) low = Math.min(low, v); }));
  return matrix.length > 1 ? low : 0;
}

function shorten(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "\u2026" : text;
}

function drawHeatmap(texts, matrix) {
  const table = $("heatmap");
  table.replaceChildren();
  const low = lowestOffDiagonal(matrix);
  $("scale").textContent = `colour scale: white = ${low.toFixed(2)} (least similar pair), red = 1.00`;
  const head = table.insertRow();
  head.appendChild(document.createElement("th"));
  texts.forEach((_, j) => {
    const th = document.createElement("th");
    th.textContent = String(j + 1);
    head.appendChild(th);
  });
  texts.forEach((text, i) => {
    const row = table.insertRow();
    const label = document.createElement("th");
    label.className = "row-label";
    label.textContent = `${i + 1}. ${shorten(text, 48)}`;
    label.title = text;
    row.appendChild(label);
    matrix[i].forEach((value, j) => {
      const cell = row.insertCell();
      cell.className = "cell";
      cell.dataset.value = value.toFixed(6);
      cell.dataset.row = String(i);
      cell.dataset.col = String(j);
      cell.textContent = value.toFixed(2);
      cell.style.background = cellColour(value, low);
      cell.style.color = (value - low) / (1 - low || 1) > 0.6 ? "#fff" : "#1d2330";
      cell.title = `${i + 1} vs ${j + 1}: ${value.toFixed(4)}`;
    });
  });
}

function showToken(token) {
  return token.replace(/ /g, "\u2423").replace(/\n/g, "\u21b5").replace(/\t/g, "\u21e5") || "\u2205";
}

function drawSoftTokens(steps) {
  const box = $("soft-tokens");
  box.replaceChildren();
  for (const step of steps) {
    const row = document.createElement("div");
    row.className = "step";
    row.dataset.step = String(step.step);
    const k = document.createElement("span");
    k.className = "k";
    k.textContent = "k=" + step.step;
    row.appendChild(k);
    for (const { token, probability } of step.tokens) {
      const chip = document.createElement("span");
      chip.className = "tok";
      chip.dataset.token = token;
      chip.title = JSON.stringify(token) + " p=" + probability.toFixed(4);
      const text = document.createElement("span");
      text.textContent = showToken(token);
      const p = document.createElement("span");
      p.className = "p";
      p.textContent = probability.toFixed(2);
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = (100 * probability).toFixed(1) + "%";
      chip.append(text, p, bar);
      row.appendChild(chip);
    }
    box.appendChild(row);
  }
}

async function inspectSelected() {
  const select = $("inspect-which");
  const texts = readTexts();
  const index = parseInt(select.value, 10);
  if (!Number.isFinite(index) || index >= texts.length) return;
  const data = await post("v1/inspect", { input: texts[index], top: 6, ...options() });
  drawSoftTokens(data.steps);
}

function fillInspectChoices(texts) {
  const select = $("inspect-which");
  const previous = parseInt(select.value, 10);
  select.replaceChildren();
  texts.forEach((text, i) => {
    const option = document.createElement("option");
    option.value = String(i);
    option.textContent = `${i + 1}. ${shorten(text, 40)}`;
    select.appendChild(option);
  });
  select.value = String(Number.isFinite(previous) && previous < texts.length ? previous : 0);
}

async function run() {
  const texts = readTexts();
  if (texts.length === 0) {
    setStatus("Type at least one text.", true);
    return;
  }
  const button = $("embed");
  button.disabled = true;
  setStatus("Embedding " + texts.length + " texts\u2026", false);
  const started = performance.now();
  try {
    const data = await post("v1/embeddings", { input: texts, encoding_format: "float", ...options() });
    const vectors = data.data.sort((a, b) => a.index - b.index).map((d) => d.embedding);
    drawHeatmap(texts, cosineMatrix(vectors));
    fillInspectChoices(texts);
    const ms = Math.round(performance.now() - started);
    setStatus(`${texts.length} texts, ${vectors[0].length} dimensions, ${data.usage.prompt_tokens} tokens, ${ms} ms`);
    await inspectSelected();
  } catch (error) {
    setStatus(error.message, true);
  } finally {
    button.disabled = false;
  }
}

async function showModel() {
  try {
    const response = await fetch("health");
    if (response.ok) $("model").textContent = (await response.json()).model;
  } catch (error) {
    // the page still works without the model name
  }
}

$("embed").addEventListener("click", run);
$("texts").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) run();
});
$("inspect-which").addEventListener("change", () => inspectSelected().catch((e) => setStatus(e.message, true)));
showModel();
