// Hermes web console. Plain JavaScript, no framework and no build step.
//
// Rules this file keeps:
//   - It talks only to this origin's HTTP/JSON API, with the API key the user typed (kept in
//     this tab's sessionStorage) as "Authorization: Bearer"; it has no other privilege.
//   - Every text that comes from the API (users, models, tools, MCP servers) reaches the page
//     through textContent or text nodes: never parsed as HTML, never an attribute that runs or loads
//     anything, never a link built from data.
'use strict';

(function () {
  const store = window.sessionStorage;
  const state = {
    key: store.getItem('hermes.key') || '',
    user: store.getItem('hermes.user') || '',
    signedIn: store.getItem('hermes.signedIn') === '1',
    // privileged: the key may list MCP servers (operators and services); operator actions are
    // shown then. The API decides in the end.
    privileged: false,
    session: null,
    sessionsToken: '',
    // run: the turn streaming now, if any.
    run: null,
  };

  const $ = (id) => document.getElementById(id);

  // el builds an element; strings among kids become text nodes.
  function el(tag, opts, ...kids) {
    const e = document.createElement(tag);
    if (opts) {
      if (opts.cls) e.className = opts.cls;
      if (opts.text !== undefined && opts.text !== null) e.textContent = String(opts.text);
      if (opts.title) e.title = String(opts.title);
      if (opts.type) e.type = opts.type;
      if (opts.onclick) e.addEventListener('click', opts.onclick);
      if (opts.testid) e.dataset.testid = opts.testid;
    }
    for (const k of kids) {
      if (k === undefined || k === null || k === false) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function when(ts) {
    if (!ts) return '';
    return String(ts).replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }

  function num(v) {
    const n = Number(v || 0);
    return Number.isFinite(n) ? n : 0;
  }

  function lower(enumName, prefix) {
    return String(enumName || '').replace(prefix, '').toLowerCase();
  }

  function pretty(jsonText) {
    if (!jsonText) return '';
    try {
      return JSON.stringify(JSON.parse(jsonText), null, 2);
    } catch (e) {
      return String(jsonText);
    }
  }

  function showError(err) {
    const box = $('error');
    if (!err) {
      box.hidden = true;
      box.textContent = '';
      return;
    }
    box.textContent = err instanceof Error ? err.message : String(err);
    box.hidden = false;
  }

  // ---- API --------------------------------------------------------------------------------

  class APIError extends Error {
    constructor(status, body) {
      const msg = (body && body.message) || ('HTTP ' + status);
      super(msg);
      this.status = status;
      this.code = body && body.code;
    }
  }

  function headers(withBody) {
    const h = { 'Accept': 'application/json' };
    if (withBody) h['Content-Type'] = 'application/json';
    if (state.key) h['Authorization'] = 'Bearer ' + state.key;
    return h;
  }

  function url(path, query) {
    const u = new URL(path, window.location.origin);
    const q = Object.assign({}, query || {});
    for (const [k, v] of Object.entries(q)) {
      if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
    }
    return u;
  }

  async function errorOf(res) {
    let body = null;
    try {
      body = await res.json();
    } catch (e) {
      body = null;
    }
    if (res.status === 401) state.signedIn && signOut('The server refused the key: ' + ((body && body.message) || 'unauthenticated'));
    return new APIError(res.status, body);
  }

  // api calls one JSON route. GET and DELETE carry the user in the query, the others in the
  // body, when the console acts for a named user (operator keys, or no keys on loopback).
  async function api(method, path, opts) {
    opts = opts || {};
    const query = Object.assign({}, opts.query || {});
    let body = opts.body;
    const bodyless = method === 'GET' || method === 'DELETE';
    if (state.user) {
      if (bodyless) query.user_id = state.user;
      else body = Object.assign({ user_id: state.user }, body || {});
    }
    const init = {
      method,
      headers: headers(!bodyless),
      credentials: 'omit',
      cache: 'no-store',
      redirect: 'error',
      referrerPolicy: 'no-referrer',
    };
    if (!bodyless) init.body = JSON.stringify(body || {});
    const res = await fetch(url(path, query), init);
    if (!res.ok) throw await errorOf(res);
    return res.json();
  }

  const enc = encodeURIComponent;

  // ---- sign-in and routing ------------------------------------------------------------------

  async function signIn(ev) {
    ev.preventDefault();
    showError(null);
    state.key = $('signin-key').value.trim();
    state.user = $('signin-user').value.trim();
    try {
      // Any authenticated call proves the key; ListTools needs no user.
      await api('GET', '/v1/tools', { query: { page_size: 1 } });
    } catch (err) {
      state.key = '';
      showError('Sign-in failed: ' + err.message);
      return;
    }
    store.setItem('hermes.key', state.key);
    store.setItem('hermes.user', state.user);
    store.setItem('hermes.signedIn', '1');
    state.signedIn = true;
    $('signin-key').value = '';
    await detectPrivilege();
    if (window.location.hash === '' || window.location.hash === '#/signin') window.location.hash = '#/sessions';
    else route();
  }

  function signOut(reason) {
    if (state.run) state.run.abort.abort();
    store.removeItem('hermes.key');
    store.removeItem('hermes.user');
    store.removeItem('hermes.signedIn');
    state.key = '';
    state.user = '';
    state.signedIn = false;
    state.privileged = false;
    // Nothing the previous key could see stays in the page.
    clearSessionView();
    for (const id of ['sessions-list', 'search-results', 'memories-list', 'tools-list', 'mcp-list']) clear($(id));
    for (const id of ['memories-meta', 'mcp-meta']) $(id).textContent = '';
    window.location.hash = '#/signin';
    route();
    if (typeof reason === 'string') showError(reason);
  }

  async function detectPrivilege() {
    try {
      await api('GET', '/v1/mcp/servers');
      state.privileged = true;
    } catch (err) {
      state.privileged = false;
    }
  }

  function show(view) {
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + view;
    for (const b of document.querySelectorAll('#nav button')) b.classList.toggle('active', b.dataset.view === view);
    $('nav').hidden = !state.signedIn;
    $('signout').hidden = !state.signedIn;
    const who = [];
    if (state.key) who.push('key …' + state.key.slice(-4));
    else if (state.signedIn) who.push('no key (loopback)');
    if (state.user) who.push('user ' + state.user);
    if (state.privileged) who.push('privileged');
    $('who').textContent = who.join(' · ');
  }

  function route() {
    showError(null);
    const hash = window.location.hash || '';
    if (!state.signedIn) {
      show('signin');
      return;
    }
    const parts = hash.replace(/^#\/?/, '').split('/');
    switch (parts[0]) {
      case 'session': {
        let id = '';
        try {
          id = decodeURIComponent(parts[1] || '');
        } catch (err) {
          id = '';
        }
        if (id) {
          show('session');
          openSession(id).catch(showError);
          return;
        }
        break;
      }
      case 'memories':
        show('memories');
        loadMemories().catch(showError);
        return;
      case 'tools':
        show('tools');
        loadTools().catch(showError);
        return;
    }
    show('sessions');
    loadSessions(false).catch(showError);
  }

  function go(hash) {
    if (window.location.hash === hash) route();
    else window.location.hash = hash;
  }

  // ---- sessions -----------------------------------------------------------------------------

  async function loadSessions(more) {
    const body = $('sessions-list');
    if (!more) {
      clear(body);
      state.sessionsToken = '';
    }
    const res = await api('GET', '/v1/sessions', { query: { page_size: 50, page_token: more ? state.sessionsToken : '' } });
    for (const s of res.sessions || []) {
      const st = s.state || {};
      const tr = el('tr', { cls: 'clickable', onclick: () => go('#/session/' + enc(s.id)) },
        el('td', { text: s.title || '(untitled)' }),
        el('td', { cls: 'mono', text: s.id }),
        el('td', { text: s.user_id }),
        el('td', { text: num(st.message_count) }),
        el('td', { text: num(st.turn_count) }),
        el('td', { text: num(st.token_count) }),
        el('td', { text: when(s.created_at) }),
        el('td', { text: when(st.updated_at) }));
      tr.dataset.session = s.id;
      body.append(tr);
    }
    if (!body.firstChild) body.append(el('tr', null, el('td', { text: 'No sessions yet.' })));
    state.sessionsToken = res.next_page_token || '';
    $('sessions-more').hidden = !state.sessionsToken;
  }

  async function createSession(ev) {
    ev.preventDefault();
    showError(null);
    try {
      const res = await api('POST', '/v1/sessions', { body: { title: $('session-title').value.trim() } });
      $('session-title').value = '';
      go('#/session/' + enc(res.session.id));
    } catch (err) {
      showError(err);
    }
  }

  async function searchMessages(ev) {
    ev.preventDefault();
    showError(null);
    const out = clear($('search-results'));
    const q = $('search-query').value.trim();
    if (!q) return;
    try {
      const res = await api('GET', '/v1/messages:search', { query: { query: q, neighbors: 1, page_size: 20 } });
      const hits = res.hits || [];
      if (!hits.length) out.append(el('p', { cls: 'meta', text: 'No message matches.' }));
      for (const h of hits) {
        const box = el('div', { cls: 'search-hit' },
          el('div', { cls: 'meta' }, 'session ',
            el('button', { type: 'button', text: h.session_id, onclick: () => go('#/session/' + enc(h.session_id)) }),
            ' · score ' + num(h.score).toFixed(3)));
        for (const m of h.before || []) box.append(messageView(m, true));
        box.append(messageView(h.message, false));
        for (const m of h.after || []) box.append(messageView(m, true));
        out.append(box);
      }
    } catch (err) {
      showError(err);
    }
  }

  function messageView(m, dim) {
    m = m || {};
    const role = lower(m.role, 'ROLE_');
    const kind = lower(m.kind, 'MESSAGE_KIND_');
    const who = [role, kind !== 'text' ? kind : '', m.tool_name ? 'tool ' + m.tool_name : '', '#' + (m.seq || ''),
      when(m.created_at), m.sticky ? 'sticky' : '', m.synthesized ? 'synthesized' : '', num(m.token_count) + ' tokens']
      .filter(Boolean).join(' · ');
    let content = m.content || '';
    if (kind === 'tool_call') content = pretty(content);
    const box = el('div', { cls: 'msg ' + role + (dim ? ' dim' : '') },
      el('div', { cls: 'who', text: who }),
      el('div', { cls: 'body', text: content }));
    box.dataset.seq = String(m.seq || '');
    return box;
  }

  // ---- one session --------------------------------------------------------------------------

  async function openSession(id) {
    const same = state.session && state.session.id === id;
    if (!same) clearSessionView();
    await loadSession(id);
    if (!same || !state.run) {
      const view = clear($('turn-view'));
      view.append(el('p', { cls: 'hint', text: 'Run a turn to watch it here as it happens, or pick one of the turns below to replay its events.' }));
      clear($('context-now'));
    }
    await Promise.all([loadMessages(id), loadTurns(id)]);
  }

  // clearSessionView empties the session view, so nothing of another session (or of the user
  // signed in before) shows while this one loads, or when it is refused.
  function clearSessionView() {
    state.session = null;
    $('session-heading').textContent = '';
    $('session-meta').textContent = '';
    for (const id of ['messages', 'turns-list', 'turn-view', 'context-now']) clear($(id));
  }

  // loadSession shows the session's title and state.
  async function loadSession(id) {
    const res = await api('GET', '/v1/sessions/' + enc(id));
    state.session = res.session;
    const s = res.session;
    const st = s.state || {};
    $('session-heading').textContent = s.title || '(untitled session)';
    $('session-meta').textContent = [s.id, 'user ' + s.user_id, 'created ' + when(s.created_at),
      num(st.message_count) + ' messages', num(st.turn_count) + ' turns', num(st.token_count) + ' tokens',
      st.summary_through_seq && num(st.summary_through_seq) ? 'summary through #' + st.summary_through_seq : ''].filter(Boolean).join(' · ');
    document.title = 'Hermes · ' + (s.title || s.id);
  }

  async function loadMessages(id) {
    const list = clear($('messages'));
    let token = '';
    let n = 0;
    do {
      const res = await api('GET', '/v1/sessions/' + enc(id) + '/messages', { query: { page_size: 500, page_token: token } });
      for (const m of res.messages || []) {
        list.append(messageView(m, false));
        n++;
      }
      token = res.next_page_token || '';
    } while (token && n < 5000);
    if (!n) list.append(el('p', { cls: 'meta', text: 'No messages yet.' }));
    list.scrollTop = list.scrollHeight;
  }

  async function loadTurns(id) {
    const body = clear($('turns-list'));
    const res = await api('GET', '/v1/sessions/' + enc(id) + '/turns', { query: { page_size: 100 } });
    for (const t of res.turns || []) {
      const status = lower(t.status, 'TURN_STATUS_').toUpperCase();
      const tr = el('tr', { cls: 'clickable', onclick: () => replayTurn(t.id).catch(showError) },
        el('td', { text: when(t.started_at) }),
        el('td', null, el('span', { cls: 'status ' + status, text: status.toLowerCase() })),
        el('td', { text: (t.text || '').slice(0, 120) }),
        el('td', { text: num(t.usage && t.usage.total_tokens) }),
        el('td', { cls: 'mono', text: t.id }));
      tr.dataset.turn = t.id;
      body.append(tr);
    }
    if (!body.firstChild) body.append(el('tr', null, el('td', { text: 'No turns yet.' })));
  }

  async function replayTurn(id) {
    showError(null);
    const res = await api('GET', '/v1/turns/' + enc(id));
    const t = res.turn;
    const view = newTurnView('Turn ' + t.id + ' (recorded)', false);
    view.setStatus(lower(t.status, 'TURN_STATUS_').toUpperCase());
    for (const ev of t.events || []) view.event(ev);
    if (t.cancelled_by) view.note('cancelled by ' + t.cancelled_by);
  }

  async function buildContext() {
    showError(null);
    const out = clear($('context-now'));
    try {
      const c = await api('GET', '/v1/sessions/' + enc(state.session.id) + '/context');
      const tk = c.tokens || {};
      out.append(stackedBar([
        ['summary', 'summary', tk.summary], ['pinned', 'pinned', tk.pinned], ['history', 'window', tk.window],
      ]));
      out.append(el('p', { cls: 'meta', text: [num(tk.total) + ' tokens (' + (tk.encoding || '') + ')',
        num(c.window_turns) + ' turns in the window', num(tk.evicted) + ' tokens evicted',
        num(c.turns_dropped_for_budget) + ' turns dropped for the budget', (c.repairs || []).length + ' repairs',
        'window from #' + (c.window_start_seq || 0)].join(' · ') }));
    } catch (err) {
      showError(err);
    }
  }

  // ---- a turn, live or recorded -----------------------------------------------------------

  // The blocks of a context, in the order the model reads them.
  const BLOCKS = [
    ['system', 'system', 'system_prompt'], ['tools', 'tool schemas', 'tool_schemas'], ['summary', 'summary', 'summary'],
    ['pinned', 'pinned', 'pinned'], ['task', 'task state', 'task_state'], ['history', 'history', 'history'],
    ['memory', 'memory', 'memory'], ['current', 'current message', 'current_message'],
  ];

  // stackedBar draws tokens per block: [[cssClass, label, tokens], ...].
  function stackedBar(parts) {
    const total = parts.reduce((a, p) => a + num(p[2]), 0);
    const bar = el('div', { cls: 'bar', testid: 'context-bar' });
    const legend = el('div', { cls: 'legend' });
    for (const [cls, label, v] of parts) {
      const n = num(v);
      legend.append(el('span', null, el('span', { cls: 'sw seg ' + cls }), label + ' ' + n));
      if (!n) continue;
      const seg = el('div', { cls: 'seg ' + cls, title: label + ': ' + n + ' tokens' });
      // CSSOM, not a style attribute: allowed under style-src 'self'.
      seg.style.flexGrow = String(n);
      seg.dataset.block = label;
      seg.dataset.tokens = String(n);
      bar.append(seg);
    }
    return el('div', { cls: 'ctx' }, bar, legend, el('div', { cls: 'meta', text: total + ' tokens' }));
  }

  // newTurnView shows a turn's events: live ones as they arrive, or a recorded turn's.
  function newTurnView(title, live) {
    const root = clear($('turn-view'));
    const status = el('span', { cls: 'status', testid: 'turn-status' });
    const answer = el('div', { cls: 'answer', testid: 'turn-answer' });
    const events = el('ol', { cls: 'events' });
    const heading = el('div', { cls: 'meta' }, el('span', { text: title }), ' ', status);
    root.append(heading, answer, events);
    const calls = new Map();
    let turnId = '';

    function add(kind, cls, ...kids) {
      const li = el('li', { cls: 'ev ' + cls }, el('span', { cls: 'kind', text: kind }), ...kids);
      events.append(li);
      return li;
    }

    const view = {
      get turnId() { return turnId; },
      setStatus(s) {
        status.textContent = s.toLowerCase();
        status.className = 'status ' + s;
      },
      note(text) { add('note', 'note', text); },
      error(text) { add('error', 'failed', text); },
      event(ev) {
        if (ev.started) {
          const s = ev.started;
          turnId = s.turn_id;
          if (live) heading.firstChild.textContent = 'Turn ' + s.turn_id;
          add('started', 'started', 'model ' + s.model + ' · user ' + s.user_id + ' · message #' + s.user_message_seq);
        } else if (ev.context) {
          const c = ev.context;
          const tk = c.tokens || {};
          const li = add('context', 'context', 'step ' + c.step + ' · ' + num(tk.total) + ' tokens');
          li.append(stackedBar(BLOCKS.map(([cls, label, f]) => [cls, label, tk[f]])));
          const facts = [num(c.window_turns) + ' turns in the window'];
          if (c.tool_selection) facts.push(c.tool_selection);
          if (num(c.repairs)) facts.push(c.repairs + ' repairs');
          if (num(c.pinned_messages)) facts.push(c.pinned_messages + ' pinned');
          if (num(c.task_state_steps)) facts.push(c.task_state_steps + ' task steps');
          if (num(c.summary_through_seq)) facts.push('summary through #' + c.summary_through_seq);
          li.append(el('div', { cls: 'meta', text: facts.join(' · ') }));
          if ((c.tools || []).length) li.append(el('div', { cls: 'meta', text: 'tools offered: ' + c.tools.join(', ') }));
        } else if (ev.memories) {
          const m = ev.memories;
          const li = add('memories', 'memories', (m.memories || []).length + ' recalled');
          if (m.error) li.append(el('div', { cls: 'status bad', text: 'recall failed: ' + m.error }));
          if ((m.memories || []).length) {
            const t = el('table', { cls: 'mini', testid: 'recalled' },
              el('tr', null, el('th', { text: 'score' }), el('th', { text: 'memory' }), el('th', { text: 'type' }), el('th', { text: 'why' })));
            for (const r of m.memories) {
              const attrs = Object.entries(r.attributes || {}).map(([k, v]) => k + '=' + v).join(', ');
              const tr = el('tr', null, el('td', { text: num(r.score).toFixed(3) }),
                el('td', null, r.content, attrs ? el('div', { cls: 'meta', text: attrs }) : null, el('div', { cls: 'meta mono', text: r.id })),
                el('td', { text: r.type }), el('td', { text: r.reason }));
              tr.dataset.memory = r.id;
              t.append(tr);
            }
            li.append(t);
          }
        } else if (ev.delta) {
          answer.append(ev.delta.text || '');
        } else if (ev.tool_call) {
          const c = ev.tool_call;
          const li = add('tool call', 'call' + (c.held ? ' validation' : ''),
            el('strong', { text: c.name }), ' · step ' + c.step + ' · ', el('span', { cls: 'mono', text: c.call_id }));
          li.dataset.call = c.call_id;
          li.dataset.tool = c.name;
          if (c.held) li.append(el('div', { cls: 'status bad', text: 'held: a required argument is missing and memory was not used; the model was asked to confirm with the user' }));
          li.append(el('pre', { cls: 'args', text: pretty(c.arguments) }));
          if (c.idempotency_key) li.append(el('div', { cls: 'meta', text: 'idempotency key ' + c.idempotency_key }));
          for (const f of c.filled || []) li.append(el('div', { cls: 'meta', text: 'filled ' + f.name + ' = ' + f.value + ' from memory ' + f.memory_id }));
          if ((c.fill_decisions || []).length) {
            const t = el('table', { cls: 'mini', testid: 'fill-decisions' },
              el('tr', null, ...['argument', 'outcome', 'value', 'memory', 'why', 'decided by', 'recalled because'].map((h) => el('th', { text: h }))));
            for (const d of c.fill_decisions) {
              t.append(el('tr', null, ...[d.name, d.outcome, d.value, d.memory_id, d.reason, d.decided_by, d.recall_reason].map((v) => el('td', { text: v || '' }))));
            }
            li.append(el('div', { cls: 'meta', text: 'fill decisions' }), t);
          }
          calls.set(c.call_id, li);
        } else if (ev.tool_progress) {
          const p = ev.tool_progress;
          const li = calls.get(p.call_id) || add('progress', 'progress', p.name);
          let row = li.querySelector('.prog');
          if (!row) {
            row = el('div', { cls: 'prog meta' });
            li.append(row);
          }
          clear(row);
          if (num(p.total) > 0) {
            const fill = el('span');
            fill.style.width = Math.min(100, (100 * num(p.progress)) / num(p.total)).toFixed(1) + '%';
            row.append(el('span', { cls: 'progress' }, fill), ' ' + num(p.progress) + '/' + num(p.total) + ' ');
          } else if (num(p.progress)) {
            row.append(num(p.progress) + ' ');
          }
          if (p.message) row.append(p.message);
          if (p.elicitation) li.append(elicitationForm(view, p.elicitation));
        } else if (ev.tool_result) {
          const r = ev.tool_result;
          const validation = !r.success && String(r.error_code || '').toLowerCase() === 'validation';
          const li = add('result', 'result ' + (r.success ? 'ok' : 'bad') + (validation ? ' validation' : ''),
            el('strong', { text: r.name }), ' ',
            el('span', { cls: 'status ' + (r.success ? 'ok' : 'bad'), text: r.success ? 'ok' : (r.error_code || 'failed') }),
            ' · ' + (r.duration || '') + ' · ' + num(r.attempts) + ' attempt(s)' + (r.replayed ? ' · replayed' : ''));
          li.dataset.call = r.call_id;
          if (validation) li.append(el('div', { cls: 'meta', text: 'validation feedback, sent back to the model:' }));
          if (r.error) li.append(el('pre', { cls: 'error', text: r.error }));
          if (r.authorization_url) {
            // As with a URL elicitation: shown to copy, never opened for the user.
            li.append(el('div', { cls: 'meta', text: 'connect your account at this address (copy it; check it first):' }),
              el('pre', { cls: 'authorization-url', testid: 'authorization-url', text: r.authorization_url }));
          }
          if (r.output) li.append(el('pre', { cls: 'output', text: pretty(r.output) }));
          const call = calls.get(r.call_id);
          if (call) call.after(li);
        } else if (ev.summary) {
          const s = ev.summary;
          add('summary', 'summary', 'summary now through #' + s.through_seq + ' · ' + num(s.tokens) + ' tokens · ' +
            num(s.folded_messages) + ' messages folded' + (s.fallback ? ' · deterministic fallback' : ''));
        } else if (ev.completed) {
          const c = ev.completed;
          answer.textContent = c.text || '';
          view.setStatus('COMPLETED');
          add('completed', 'completed', num(c.steps) + ' steps · ' + usage(c.usage));
        } else if (ev.failed) {
          const f = ev.failed;
          view.setStatus(f.code === 'CANCELLED' ? 'CANCELLED' : 'FAILED');
          add('failed', 'failed', f.code + ': ', el('span', { text: f.message }), ' · ' + num(f.steps) + ' steps · ' + usage(f.usage));
        }
      },
    };
    return view;
  }

  function usage(u) {
    u = u || {};
    return num(u.prompt_tokens) + ' prompt + ' + num(u.completion_tokens) + ' completion tokens' +
      (num(u.cached_tokens) ? ' (' + num(u.cached_tokens) + ' cached)' : '') + ', ' + num(u.model_calls) + ' model calls (' + (u.source || '?') + ')';
  }

  // elicitationForm renders a tool's request for input. The schema is a flat object of
  // primitive fields; anything else is offered as plain text. A URL is shown as text to copy,
  // never as a link.
  function elicitationForm(view, e) {
    const box = el('form', { cls: 'elicit', testid: 'elicitation' });
    box.append(el('div', null, el('strong', { text: e.server }), ' asks: ', el('span', { text: e.message })));
    if (e.expires_at) box.append(el('div', { cls: 'meta', text: 'answer before ' + when(e.expires_at) }));
    const fields = [];
    if (e.url) {
      box.append(el('div', { cls: 'meta', text: 'It asks you to open this address yourself (copy it; check it first):' }), el('pre', { text: e.url }));
    } else {
      let schema = {};
      try {
        schema = JSON.parse(e.requested_schema || '{}') || {};
      } catch (err) {
        schema = {};
      }
      const required = new Set(Array.isArray(schema.required) ? schema.required : []);
      for (const [name, prop] of Object.entries(schema.properties || {})) {
        const p = prop && typeof prop === 'object' ? prop : {};
        let input;
        if (Array.isArray(p.enum)) {
          input = el('select');
          for (const v of p.enum) input.append(el('option', { text: String(v) }));
        } else {
          input = el('input');
          input.type = p.type === 'boolean' ? 'checkbox' : (p.type === 'number' || p.type === 'integer') ? 'number' : 'text';
        }
        input.name = name;
        if (required.has(name) && input.type !== 'checkbox') input.required = true;
        fields.push([name, p.type, input]);
        box.append(el('label', null, (p.title || name) + (required.has(name) ? ' *' : ''),
          p.description ? el('span', { cls: 'meta', text: ' ' + p.description }) : null, input));
      }
    }
    const answer = async (action) => {
      const body = { turn_id: view.turnId, elicitation_id: e.id, action };
      if (action === 'accept' && !e.url) {
        const content = {};
        for (const [name, type, input] of fields) {
          if (type === 'boolean') content[name] = input.checked;
          else if (type === 'number' || type === 'integer') {
            if (input.value !== '') content[name] = Number(input.value);
          } else if (input.value !== '') content[name] = input.value;
        }
        body.content = JSON.stringify(content);
      }
      try {
        await api('POST', '/hermes.orchestrator.v1.OrchestratorService/AnswerElicitation', { body });
        clear(box).append(el('div', { cls: 'meta', text: 'answered: ' + action }));
      } catch (err) {
        showError(err);
      }
    };
    box.addEventListener('submit', (ev) => {
      ev.preventDefault();
      answer('accept');
    });
    box.append(el('div', { cls: 'row' },
      el('button', { type: 'submit', text: 'Accept' }),
      el('button', { type: 'button', text: 'Decline', onclick: () => answer('decline') }),
      el('button', { type: 'button', text: 'Cancel', onclick: () => answer('cancel') })));
    return box;
  }

  // parseFrame reads one server-sent event.
  function parseFrame(frame) {
    let event = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? '' : line.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    return { event, data: data.join('\n') };
  }

  async function runTurn(ev) {
    ev.preventDefault();
    showError(null);
    if (state.run) return;
    const text = $('turn-text').value;
    if (!text.trim()) return;
    const session = state.session;
    const abort = new AbortController();
    const run = { abort, view: newTurnView('Turn (starting)', true) };
    state.run = run;
    run.view.setStatus('RUNNING');
    $('turn-run').disabled = true;
    $('turn-cancel').disabled = false;
    const body = { text, options: { skip_memory: $('turn-skip-memory').checked, sticky: $('turn-sticky').checked } };
    if (state.user) body.user_id = state.user;
    let finished = false;
    try {
      const res = await fetch(url('/v1/sessions/' + enc(session.id) + '/turns'), {
        method: 'POST',
        headers: Object.assign(headers(true), { 'Accept': 'text/event-stream' }),
        body: JSON.stringify(body),
        credentials: 'omit',
        cache: 'no-store',
        redirect: 'error',
        referrerPolicy: 'no-referrer',
        signal: abort.signal,
      });
      if (!res.ok) throw await errorOf(res);
      $('turn-text').value = '';
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true }).replace(/\r\n/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const frame = parseFrame(buf.slice(0, i));
          buf = buf.slice(i + 2);
          if (!frame.data) continue;
          let msg;
          try {
            msg = JSON.parse(frame.data);
          } catch (err) {
            run.view.error('unreadable event: ' + frame.data.slice(0, 200));
            continue;
          }
          if (frame.event === 'error') {
            run.view.setStatus('FAILED');
            run.view.error('stream ended by an error: ' + (msg.message || ''));
            finished = true;
            continue;
          }
          run.view.event(msg);
          if (msg.completed || msg.failed) finished = true;
        }
      }
      if (!finished) {
        run.view.setStatus('CANCELLED');
        run.view.note('the stream ended before the turn did');
      }
    } catch (err) {
      if (err && err.name === 'AbortError') {
        run.view.setStatus('CANCELLED');
        run.view.note('stopped reading; the server cancels a turn whose client goes away');
      } else {
        run.view.setStatus('FAILED');
        showError(err);
      }
    } finally {
      if (state.run === run) state.run = null;
      $('turn-run').disabled = false;
      $('turn-cancel').disabled = true;
      if (state.session && state.session.id === session.id) {
        await Promise.all([loadSession(session.id), loadMessages(session.id), loadTurns(session.id)]).catch(showError);
      }
    }
  }

  async function cancelTurn() {
    const run = state.run;
    if (!run) return;
    $('turn-cancel').disabled = true;
    if (!run.view.turnId) {
      run.abort.abort();
      return;
    }
    try {
      await api('POST', '/v1/turns/' + enc(run.view.turnId) + ':cancel', { body: { reason: 'cancelled in the web console' } });
    } catch (err) {
      showError(err);
      run.abort.abort();
    }
  }

  // ---- memories -----------------------------------------------------------------------------

  function memoryRow(m, score) {
    const src = lower(m.source, 'SOURCE_');
    const origin = el('td', null);
    if (m.session_id) origin.append(el('button', { type: 'button', text: 'session ' + m.session_id, onclick: () => go('#/session/' + enc(m.session_id)) }));
    if (m.turn_id) origin.append(el('div', { cls: 'meta mono', text: 'turn ' + m.turn_id }));
    const attrs = Object.entries(m.attributes || {}).map(([k, v]) => k + '=' + v).join(', ');
    const tr = el('tr', null,
      el('td', null, el('span', { cls: 'content', text: m.content }), attrs ? el('div', { cls: 'meta', text: attrs }) : null,
        el('div', { cls: 'meta mono', text: m.id })),
      el('td', { text: lower(m.type, 'MEMORY_TYPE_') + ' · ' + lower(m.tier, 'TIER_') }),
      el('td', { text: score === undefined ? '' : num(score).toFixed(3) }),
      el('td', { text: src + ' · confidence ' + num(m.confidence).toFixed(2) }),
      origin,
      el('td', { text: when(m.created_at) }),
      el('td', { text: when(m.updated_at) }),
      el('td', { text: when(m.last_recalled_at) + (num(m.recall_count) ? ' (' + num(m.recall_count) + '×)' : '') }),
      el('td', null, el('button', { type: 'button', cls: 'danger', text: 'Forget', onclick: () => forget(m.id) })));
    tr.dataset.memory = m.id;
    return tr;
  }

  async function loadMemories() {
    const body = clear($('memories-list'));
    const res = await api('GET', '/v1/memories', { query: { page_size: 200 } });
    const ms = res.memories || [];
    for (const m of ms) body.append(memoryRow(m));
    $('memories-meta').textContent = ms.length + ' memories' + (res.next_page_token ? ' (first page)' : '');
  }

  async function recall(ev) {
    ev.preventDefault();
    showError(null);
    const q = $('recall-query').value.trim();
    if (!q) return loadMemories().catch(showError);
    try {
      const res = await api('POST', '/v1/memories:recall', { body: { query: q, limit: 20 } });
      const body = clear($('memories-list'));
      for (const r of res.memories || []) {
        const tr = memoryRow(r.memory || {}, r.score);
        tr.cells[2].title = 'similarity ' + num(r.similarity).toFixed(3) + (r.reason ? ' · ' + r.reason : '');
        if (r.reason) tr.cells[2].append(el('div', { cls: 'meta', text: r.reason }));
        body.append(tr);
      }
      $('memories-meta').textContent = (res.memories || []).length + ' recalled for the query (min similarity ' +
        num(res.min_similarity).toFixed(2) + ', embedder ' + (res.embedder || '?') + ')';
    } catch (err) {
      showError(err);
    }
  }

  async function remember(ev) {
    ev.preventDefault();
    showError(null);
    const content = $('remember-content').value.trim();
    if (!content) return;
    try {
      await api('POST', '/v1/memories', { body: { type: $('remember-type').value, content } });
      $('remember-content').value = '';
      await loadMemories();
    } catch (err) {
      showError(err);
    }
  }

  async function forget(id) {
    showError(null);
    try {
      await api('DELETE', '/v1/memories/' + enc(id));
      await loadMemories();
    } catch (err) {
      showError(err);
    }
  }

  // ---- tools and MCP servers ----------------------------------------------------------------

  async function loadTools() {
    await detectPrivilege();
    show('tools');
    for (const th of document.querySelectorAll('#view-tools th.op')) th.textContent = state.privileged ? 'Operator' : '';
    const body = clear($('tools-list'));
    let token = '';
    do {
      const res = await api('GET', '/v1/tools', { query: { page_size: 100, page_token: token } });
      for (const t of res.tools || []) {
        const spec = t.spec || {};
        const op = el('td', { cls: 'op' });
        if (state.privileged) {
          op.append(el('button', { type: 'button', cls: 'danger', text: 'Unregister', onclick: () => unregisterTool(spec.name, t.source) }));
        }
        const tr = el('tr', null,
          el('td', { cls: 'mono', text: spec.name }),
          el('td', { text: spec.description }),
          el('td', { text: t.source }),
          el('td', { text: (spec.groups || []).join(', ') }),
          el('td', { text: num(t.schema_tokens) }),
          el('td', { text: t.version }),
          op);
        tr.dataset.tool = spec.name;
        body.append(tr);
      }
      token = res.next_page_token || '';
    } while (token);

    const mcp = clear($('mcp-list'));
    if (!state.privileged) {
      $('mcp-meta').textContent = 'MCP servers are shown to operator and service keys.';
      return;
    }
    const res = await api('GET', '/v1/mcp/servers');
    const servers = res.servers || [];
    $('mcp-meta').textContent = servers.length + ' servers';
    for (const s of servers) {
      const spec = s.spec || {};
      const tr = el('tr', null,
        el('td', { cls: 'mono', text: spec.name }),
        el('td', null, el('span', { cls: 'status', text: lower(s.state, 'SERVER_STATE_') })),
        el('td', { text: num(s.tool_count) + ((s.skipped_tools || []).length ? ' (' + s.skipped_tools.length + ' skipped)' : '') }),
        el('td', { text: [s.server_info, s.protocol_version].filter(Boolean).join(' · ') }),
        el('td', null, el('pre', { cls: 'error', text: s.last_error || '' })),
        el('td', { text: (s.warnings || []).join('\n') }),
        el('td', { text: when(s.connected_at) + (num(s.reconnects) ? ' · ' + s.reconnects + ' reconnects' : '') }),
        el('td', { cls: 'op' }, el('button', { type: 'button', cls: 'danger', text: 'Remove', onclick: () => removeServer(spec.name) })));
      tr.dataset.server = spec.name;
      mcp.append(tr);
    }
  }

  async function unregisterTool(name, source) {
    showError(null);
    try {
      await api('DELETE', '/v1/tools/' + enc(name), { query: { source } });
      await loadTools();
    } catch (err) {
      showError(err);
    }
  }

  async function removeServer(name) {
    showError(null);
    try {
      await api('DELETE', '/v1/mcp/servers/' + enc(name));
      await loadTools();
    } catch (err) {
      showError(err);
    }
  }

  // ---- wiring -------------------------------------------------------------------------------

  function init() {
    $('signin-form').addEventListener('submit', signIn);
    $('signout').addEventListener('click', () => signOut());
    for (const b of document.querySelectorAll('#nav button')) b.addEventListener('click', () => go('#/' + b.dataset.view));
    $('session-create').addEventListener('submit', createSession);
    $('sessions-more').addEventListener('click', () => loadSessions(true).catch(showError));
    $('search-form').addEventListener('submit', searchMessages);
    $('turn-form').addEventListener('submit', runTurn);
    $('turn-text').addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        $('turn-form').requestSubmit();
      }
    });
    $('turn-cancel').addEventListener('click', cancelTurn);
    $('context-load').addEventListener('click', buildContext);
    $('remember-form').addEventListener('submit', remember);
    $('recall-form').addEventListener('submit', recall);
    $('recall-clear').addEventListener('click', () => {
      $('recall-query').value = '';
      loadMemories().catch(showError);
    });
    window.addEventListener('hashchange', route);
    document.body.dataset.ready = '1';
    if (state.signedIn) detectPrivilege().then(route);
    else route();
  }

  init();
}());
