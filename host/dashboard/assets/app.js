// rlhost dashboard: the page is rendered by the server; this script keeps
// it current and reads out chart values on hover. It builds every piece of
// text with textContent, never as markup.
'use strict';

// Live updates. The server sends an event whenever a run's files change;
// the page then fetches itself again and swaps in the parts marked
// data-live, keeping which sections are open.
(function () {
  const status = document.getElementById('live-status');
  const say = (text, cls) => { if (status) { status.textContent = text; status.className = 'live ' + cls; } };
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(location.href, { cache: 'no-store' });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
      for (const el of document.querySelectorAll('[data-live]')) {
        const fresh = doc.getElementById(el.id);
        if (!fresh || fresh.innerHTML === el.innerHTML) continue;
        for (const d of fresh.querySelectorAll('details[id]')) {
          const old = document.getElementById(d.id);
          if (old) d.open = old.open;
        }
        el.replaceWith(document.adoptNode(fresh));
      }
      document.dispatchEvent(new Event('rlhost:updated'));
    } catch (e) {
      // The next event tries again.
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  if (!window.EventSource) { say('no live updates', 'off'); return; }
  const es = new EventSource('/events');
  es.onopen = () => say('live', 'on');
  es.onmessage = refresh;
  es.onerror = () => say('disconnected: the dashboard stopped (reconnecting)', 'off');
})();

// Filters apply as soon as a menu or box changes; empty fields stay out of
// the URL, so links stay short.
document.addEventListener('change', (e) => {
  const t = e.target;
  if (t.form && t.form.classList.contains('auto') && (t.tagName === 'SELECT' || t.type === 'checkbox')) t.form.requestSubmit();
});
document.addEventListener('submit', (e) => {
  for (const el of e.target.querySelectorAll('input, select')) if (el.name && el.value === '') el.disabled = true;
});

// Chart read-out: the step under the pointer, every run's value there.
(function () {
  const tip = document.createElement('div');
  tip.className = 'tip';
  tip.hidden = true;
  document.addEventListener('DOMContentLoaded', () => document.body.appendChild(tip));
  const cache = new WeakMap();
  const points = (g) => {
    let p = cache.get(g);
    if (!p) { p = JSON.parse(g.dataset.points || '[]'); cache.set(g, p); }
    return p;
  };
  const nearest = (ps, x) => {
    let lo = 0, hi = ps.length - 1;
    if (hi < 0) return null;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (ps[mid][0] < x) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && Math.abs(ps[lo - 1][0] - x) <= Math.abs(ps[lo][0] - x)) lo--;
    return ps[lo];
  };
  let hot = [];
  const clear = () => {
    tip.hidden = true;
    for (const c of hot) c.classList.remove('hot');
    hot = [];
    for (const g of document.querySelectorAll('svg.chart .guide')) g.setAttribute('visibility', 'hidden');
  };
  document.addEventListener('mousemove', (e) => {
    const svg = e.target.closest ? e.target.closest('svg.chart') : null;
    if (!svg) { if (!tip.hidden) clear(); return; }
    const ctm = svg.getScreenCTM();
    if (!ctm) return;
    const pt = new DOMPoint(e.clientX, e.clientY).matrixTransform(ctm.inverse());
    const x0 = +svg.dataset.x0, x1 = +svg.dataset.x1, s0 = +svg.dataset.s0, s1 = +svg.dataset.s1;
    const frac = Math.min(1, Math.max(0, (pt.x - x0) / (x1 - x0)));
    const step = s1 === s0 ? s0 : Math.round(s0 + frac * (s1 - s0));
    clear();
    const head = document.createElement('div');
    head.className = 'tip-head';
    let shown = null;
    const rows = [];
    for (const g of svg.querySelectorAll('g.series')) {
      const p = nearest(points(g), step);
      if (!p) continue;
      if (shown === null || Math.abs(p[0] - step) < Math.abs(shown - step)) shown = p[0];
      rows.push([g, p]);
    }
    if (shown === null) return;
    head.textContent = (svg.getAttribute('aria-label') || '') + ' · step ' + shown;
    tip.replaceChildren(head);
    for (const [g, p] of rows) {
      if (p[0] !== shown) continue;
      const row = document.createElement('div');
      row.className = 'tip-row';
      const sw = document.createElement('span');
      sw.className = 'sw';
      sw.style.background = g.dataset.color;
      const lab = document.createElement('span');
      lab.className = 'lab';
      lab.textContent = g.dataset.label;
      const val = document.createElement('span');
      val.className = 'val';
      const names = JSON.parse(g.dataset.extra || 'null') || [];
      let text = String(p[1]);
      if (names.length) text += ' (' + names.map((n, i) => n + ' ' + p[2 + i]).join(', ') + ')';
      val.textContent = text;
      row.append(sw, lab, val);
      tip.append(row);
      const dot = g.querySelector('circle.pt[data-step="' + p[0] + '"]');
      if (dot) { dot.classList.add('hot'); hot.push(dot); }
    }
    const guide = svg.querySelector('.guide');
    if (guide) {
      const gx = s1 === s0 ? (x0 + x1) / 2 : x0 + (shown - s0) / (s1 - s0) * (x1 - x0);
      guide.setAttribute('x1', gx); guide.setAttribute('x2', gx); guide.setAttribute('visibility', 'visible');
    }
    tip.hidden = false;
    const w = tip.offsetWidth, h = tip.offsetHeight;
    let left = e.clientX + 14, top = e.clientY + 14;
    if (left + w > window.innerWidth - 8) left = e.clientX - w - 14;
    if (top + h > window.innerHeight - 8) top = e.clientY - h - 14;
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
  });
})();

// Keyboard: j and k step through the episodes of the list.
document.addEventListener('keydown', (e) => {
  if (e.target.closest && e.target.closest('input, select, textarea')) return;
  if (e.altKey || e.ctrlKey || e.metaKey) return;
  const a = document.getElementById(e.key === 'j' ? 'ep-next' : e.key === 'k' ? 'ep-prev' : '');
  if (a) location.href = a.href;
});
