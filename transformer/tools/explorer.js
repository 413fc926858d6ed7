// The attention explorer: DATA = {title, input, views: [{name, queries,
// keys, weights: [layer][head][query][key], and for images: image (a PNG
// data URL), grid, first_patch}]}, written by explore.py.
'use strict';

const ROW = 20;  // pixels per token row, as .token's height in the CSS
const state = {view: 0, layer: 0, head: 'all', mode: 'lines', hover: null};
const byId = (id) => document.getElementById(id);

function view() { return DATA.views[state.view]; }

// The [queries][keys] weights shown: one head, or the mean of the layer's.
function matrix(layer = state.layer, head = state.head) {
  const heads = view().weights[layer];
  if (head !== 'all') return heads[head];
  return heads[0].map((row, t) => row.map((_, s) =>
      heads.reduce((sum, h) => sum + h[t][s], 0) / heads.length));
}

function options(select, values, labels) {
  select.replaceChildren(...values.map((value, i) => {
    const option = document.createElement('option');
    option.value = String(value);
    option.textContent = labels ? labels[i] : String(value);
    return option;
  }));
}

function tokens(column, labels, side) {
  column.replaceChildren(...labels.map((label, i) => {
    const span = document.createElement('div');
    span.className = 'token';
    span.dataset.index = String(i);
    span.textContent = label;
    if (side === 'query') {
      span.addEventListener('mouseenter', () => { state.hover = i; draw(); });
      span.addEventListener('mouseleave', () => { state.hover = null; draw(); });
    }
    return span;
  }));
}

function drawLines(weights) {
  const svg = byId('lines');
  const v = view();
  const height = ROW * Math.max(v.queries.length, v.keys.length);
  svg.setAttribute('height', String(height));
  const lines = [];
  weights.forEach((row, t) => {
    if (state.hover !== null && t !== state.hover) return;
    row.forEach((w, s) => {
      const line = document.createElementNS('http://www.w3.org/2000/svg',
                                            'line');
      line.setAttribute('x1', '0');
      line.setAttribute('y1', String(ROW * t + ROW / 2));
      line.setAttribute('x2', svg.getAttribute('width'));
      line.setAttribute('y2', String(ROW * s + ROW / 2));
      line.setAttribute('stroke-opacity', String(w));
      line.dataset.query = String(t);
      line.dataset.key = String(s);
      line.dataset.weight = w.toFixed(4);
      lines.push(line);
    });
  });
  svg.replaceChildren(...lines);
  // The hovered query's weights on the key tokens themselves.
  document.querySelectorAll('#qcol .token').forEach((span, t) =>
      span.classList.toggle('active', t === state.hover));
  document.querySelectorAll('#kcol .token').forEach((span, s) => {
    const w = state.hover === null ? null : weights[state.hover][s];
    span.style.background = w === null ? '' : `rgba(31, 95, 191, ${w})`;
    span.style.color = w !== null && w > 0.6 ? '#fff' : '';
    if (w === null) delete span.dataset.weight;
    else span.dataset.weight = w.toFixed(4);
  });
}

// Viridis-like ramp from dark blue (0) to yellow (1).
function colour(w) {
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98],
                 [253, 231, 37]];
  const x = Math.min(Math.max(w, 0), 1) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

function paint(canvas, weights, cell) {
  const t = weights.length, s = weights[0].length;
  canvas.width = s * cell;
  canvas.height = t * cell;
  const context = canvas.getContext('2d');
  weights.forEach((row, i) => row.forEach((w, j) => {
    context.fillStyle = colour(w);
    context.fillRect(j * cell, i * cell, cell, cell);
  }));
}

// For an image: the hovered query's (else the first one's) attention over
// the patches, on the picture, scaled to its largest weight.
function drawImage(weights) {
  const v = view();
  const figure = byId('imageview');
  figure.hidden = !v.image;
  if (!v.image) return;
  if (byId('picture').getAttribute('src') !== v.image) {
    byId('picture').setAttribute('src', v.image);
  }
  const query = state.hover === null ? 0 : state.hover;
  const patches = weights[query].slice(v.first_patch,
                                       v.first_patch + v.grid * v.grid);
  const top = Math.max(...patches, 1e-12);
  const canvas = byId('overlay');
  canvas.width = v.grid;
  canvas.height = v.grid;
  const context = canvas.getContext('2d');
  context.clearRect(0, 0, v.grid, v.grid);
  patches.forEach((w, i) => {
    context.fillStyle = `rgba(255, 40, 0, ${0.85 * w / top})`;
    context.fillRect(i % v.grid, Math.floor(i / v.grid), 1, 1);
  });
  canvas.dataset.query = String(query);
  byId('overlay-caption').textContent =
      `${v.queries[query]}: attention over the patches (max ${top.toFixed(3)})`;
}

// The mean entropy (nats) of a head's rows that attend to anything: low
// for a head that looks at one key, log(S) for one that looks everywhere.
function entropy(weights) {
  let total = 0, rows = 0;
  weights.forEach((row) => {
    if (row.reduce((a, b) => a + b, 0) <= 0) return;
    total -= row.reduce((sum, w) => sum + (w > 0 ? w * Math.log(w) : 0), 0);
    rows += 1;
  });
  return rows ? total / rows : 0;
}

// The mean distance, in positions, a head attends over (sum_s w_ts |t - s|,
// averaged over the rows that attend to anything): for self-attention over
// a sequence only (not over image patches or another sequence).
function distance(weights) {
  let total = 0, rows = 0;
  weights.forEach((row, t) => {
    if (row.reduce((a, b) => a + b, 0) <= 0) return;
    total += row.reduce((sum, w, s) => sum + w * Math.abs(t - s), 0);
    rows += 1;
  });
  return rows ? total / rows : 0;
}

function isSequenceSelfAttention(v) {
  return v.image === undefined && v.queries.length === v.keys.length &&
      v.queries.every((q, i) => q === v.keys[i]);
}

function drawModelView() {
  const v = view();
  const heads = v.weights[0].length;
  const grid = byId('modelview');
  grid.style.gridTemplateColumns = `repeat(${heads}, max-content)`;
  const cell = Math.max(1, Math.floor(
      96 / Math.max(v.queries.length, v.keys.length)));
  const figures = [];
  v.weights.forEach((layer, l) => layer.forEach((weights, h) => {
    const figure = document.createElement('figure');
    figure.dataset.layer = String(l);
    figure.dataset.head = String(h);
    const canvas = document.createElement('canvas');
    paint(canvas, weights, cell);
    const caption = document.createElement('figcaption');
    const h_ = entropy(weights);
    figure.dataset.entropy = h_.toFixed(4);
    caption.textContent = `layer ${l} head ${h} · entropy ${h_.toFixed(2)}`;
    if (isSequenceSelfAttention(v)) {
      const d = distance(weights);
      figure.dataset.distance = d.toFixed(4);
      caption.textContent += ` · distance ${d.toFixed(1)}`;
    }
    figure.append(canvas, caption);
    figure.addEventListener('click', () => {
      state.layer = l;
      state.head = h;
      byId('layer').value = String(l);
      byId('head').value = String(h);
      draw();
      byId('controls').scrollIntoView();
    });
    figures.push(figure);
  }));
  grid.replaceChildren(...figures);
}

function draw() {
  const weights = matrix();
  const lines = state.mode === 'lines';
  byId('headview').hidden = false;
  byId('lines').style.display = lines ? '' : 'none';
  byId('kcol').style.display = lines ? '' : 'none';
  byId('heatmap').hidden = lines;
  if (lines) drawLines(weights);
  else paint(byId('heatmap'), weights, ROW);
  drawImage(weights);
  document.querySelectorAll('#modelview figure').forEach((figure) =>
      figure.classList.toggle('selected',
          figure.dataset.layer === String(state.layer) &&
          figure.dataset.head === String(state.head)));
}

function selectView(index) {
  state.view = index;
  state.layer = 0;
  state.hover = null;
  const v = view();
  options(byId('layer'), v.weights.map((_, l) => l));
  const heads = v.weights[0].map((_, h) => h);
  options(byId('head'), ['all', ...heads],
          ['all (mean)', ...heads.map(String)]);
  byId('head').value = String(state.head === 'all' ||
                              state.head >= heads.length ? 'all' : state.head);
  state.head = byId('head').value === 'all' ? 'all' :
      Number(byId('head').value);
  tokens(byId('qcol'), v.queries, 'query');
  tokens(byId('kcol'), v.keys, 'key');
  drawModelView();
  draw();
}

function start() {
  document.title = `Attention explorer: ${DATA.title}`;
  byId('title').textContent = DATA.title;
  byId('input').textContent = DATA.input;
  options(byId('view'), DATA.views.map((_, i) => i),
          DATA.views.map((v) => v.name));
  byId('view').addEventListener('change', (e) =>
      selectView(Number(e.target.value)));
  byId('layer').addEventListener('change', (e) => {
    state.layer = Number(e.target.value);
    draw();
  });
  byId('head').addEventListener('change', (e) => {
    state.head = e.target.value === 'all' ? 'all' : Number(e.target.value);
    draw();
  });
  byId('mode').addEventListener('change', (e) => {
    state.mode = e.target.value;
    draw();
  });
  selectView(0);
}

start();
