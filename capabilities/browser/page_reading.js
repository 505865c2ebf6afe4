// Page reading for browser_execute: readPage, find and getText run this in the page.
// Elements a read lists get a ref ("ref_12"), kept in the attribute data-codedesk-ref so later
// steps can address them with a plain selector; a new document starts without refs.
(args) => {
  const ATTR = "data-codedesk-ref";
  const INTERACTIVE_TAGS = new Set(["A", "BUTTON", "INPUT", "SELECT", "TEXTAREA", "SUMMARY", "OPTION"]);
  const INTERACTIVE_ROLES = new Set([
    "button", "link", "checkbox", "radio", "textbox", "combobox", "listbox", "option", "menuitem",
    "menuitemcheckbox", "menuitemradio", "switch", "tab", "slider", "spinbutton", "searchbox", "treeitem",
  ]);
  const LANDMARKS = { MAIN: "main", NAV: "navigation", HEADER: "banner", FOOTER: "contentinfo", ASIDE: "complementary", FORM: "form" };
  const clip = (s, n = 80) => { s = (s || "").replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; };

  function refOf(el) {
    let ref = el.getAttribute(ATTR);
    if (!ref) {
      window.__codedeskRefCount = (window.__codedeskRefCount || 0) + 1;
      ref = "ref_" + window.__codedeskRefCount;
      el.setAttribute(ATTR, ref);
    }
    return ref;
  }

  function visible(el) {
    if (el.closest("[hidden],[aria-hidden=true]")) return false;
    if (typeof el.checkVisibility === "function") {
      return el.checkVisibility({ checkOpacity: false, checkVisibilityCSS: true });
    }
    return !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  }

  function role(el) {
    const explicit = el.getAttribute("role");
    if (explicit) return explicit.split(" ")[0];
    const tag = el.tagName;
    if (tag === "A") return el.hasAttribute("href") ? "link" : "generic";
    if (tag === "BUTTON" || tag === "SUMMARY") return "button";
    if (tag === "SELECT") return el.multiple || el.size > 1 ? "listbox" : "combobox";
    if (tag === "TEXTAREA") return "textbox";
    if (tag === "OPTION") return "option";
    if (tag === "IMG") return "img";
    if (/^H[1-6]$/.test(tag)) return "heading";
    if (tag === "INPUT") {
      const t = (el.type || "text").toLowerCase();
      return { checkbox: "checkbox", radio: "radio", button: "button", submit: "button", reset: "button",
               image: "button", range: "slider", number: "spinbutton", search: "searchbox", file: "file",
               hidden: "hidden" }[t] || "textbox";
    }
    if (LANDMARKS[tag]) return LANDMARKS[tag];
    if (el.isContentEditable) return "textbox";
    if (tag === "P" || tag === "LI" || tag === "TD" || tag === "TH" || tag === "LABEL") return "text";
    return "generic";
  }

  function name(el) {
    const labelledby = el.getAttribute("aria-labelledby");
    if (labelledby) {
      const text = labelledby.split(/\s+/).map((id) => document.getElementById(id)?.innerText || "").join(" ");
      if (text.trim()) return clip(text);
    }
    const aria = el.getAttribute("aria-label");
    if (aria) return clip(aria);
    if (el.labels && el.labels.length) return clip([...el.labels].map((l) => l.innerText).join(" "));
    if (el.tagName === "IMG") return clip(el.alt || el.title);
    if (el.tagName === "INPUT" && ["button", "submit", "reset"].includes(el.type)) return clip(el.value || el.type);
    if (el.placeholder) return clip(el.placeholder);
    if (["INPUT", "SELECT", "TEXTAREA"].includes(el.tagName)) return clip(el.title || el.name || "");
    // A container is named by its label only: its text is listed element by element below it.
    if (LANDMARKS[el.tagName] && !["FOOTER", "HEADER"].includes(el.tagName)) return clip(el.title || "");
    return clip(el.innerText || el.textContent || el.title || "");
  }

  function interactive(el) {
    if (INTERACTIVE_TAGS.has(el.tagName)) {
      if (el.tagName === "A" && !el.hasAttribute("href")) return false;
      if (el.tagName === "INPUT" && el.type === "hidden") return false;
      if (el.tagName === "OPTION") return false; // listed with their <select>
      return true;
    }
    const r = el.getAttribute("role");
    if (r && INTERACTIVE_ROLES.has(r)) return true;
    if (el.isContentEditable && !el.parentElement?.isContentEditable) return true;
    const tabindex = el.getAttribute("tabindex");
    return tabindex !== null && Number(tabindex) >= 0;
  }

  function listed(el, filter) {
    if (interactive(el)) return true;
    if (filter !== "all") return false;
    const r = role(el);
    if (r === "heading" || r === "img" || Object.values(LANDMARKS).includes(r)) return true;
    if (r === "text") return !!clip(el.innerText) && !el.querySelector("a,button,input,select,textarea");
    return false;
  }

  function describe(el) {
    const r = role(el);
    let line = r;
    const n = name(el);
    if (n) line += ` "${n.replace(/"/g, "'")}"`;
    line += ` [${refOf(el)}]`;
    if (r === "heading") line += ` level=${el.tagName.slice(1)}`;
    if (el.tagName === "A" && el.getAttribute("href")) line += ` -> ${clip(el.getAttribute("href"), 120)}`;
    if (el.tagName === "INPUT" || el.tagName === "TEXTAREA") {
      if (el.type === "checkbox" || el.type === "radio") line += el.checked ? " checked" : " unchecked";
      else if (el.type === "file") line += el.files && el.files.length ? ` files=${[...el.files].map((f) => f.name).join(",")}` : "";
      else if (el.value) line += ` value="${clip(el.value, 60).replace(/"/g, "'")}"`;
    }
    if (el.tagName === "SELECT") {
      const opts = [...el.options].map((o) => (o.selected ? "*" : "") + clip(o.label || o.text, 30));
      line += ` options: ${opts.slice(0, 20).join(" | ")}${opts.length > 20 ? ` (+${opts.length - 20} more)` : ""}`;
    }
    if (el.disabled) line += " disabled";
    if (el.required) line += " required";
    return line;
  }

  function readPage(filter, depth, rootRef, cap) {
    let root = document.body || document.documentElement;
    if (rootRef) {
      root = document.querySelector(`[${ATTR}="${rootRef}"]`);
      if (!root) return { stale: rootRef };
    }
    const lines = [];
    let count = 0;
    let truncated = false;
    const walk = (el, level) => {
      if (truncated) return;
      for (const child of el.children) {
        if (truncated) return;
        if (!visible(child) && child.tagName !== "DETAILS") continue;
        let next = level;
        if (listed(child, filter)) {
          if (depth !== null && level >= depth) continue;
          if (count >= cap) { truncated = true; return; }
          lines.push("  ".repeat(level) + "- " + describe(child));
          count += 1;
          next = level + 1;
        }
        if (child.tagName !== "SELECT") walk(child, next);
        if (child.shadowRoot) walk(child.shadowRoot, next);
      }
    };
    walk(root, 0);
    return { lines, count, truncated, title: document.title, url: location.href };
  }

  function find(query, limit) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    const scored = [];
    for (const el of document.querySelectorAll("*")) {
      if (!(interactive(el) || /^H[1-6]$/.test(el.tagName))) continue;
      if (!visible(el)) continue;
      const near = clip(el.closest("label,li,tr,fieldset,section,form")?.innerText || el.parentElement?.innerText || "", 200);
      const hay = [role(el), name(el), el.placeholder || "", el.name || "", el.id || "", el.title || ""].join(" ").toLowerCase();
      let score = 0;
      for (const w of words) {
        if (hay.includes(w)) score += 2;
        else if (near.toLowerCase().includes(w)) score += 1;
      }
      if (score > 0) scored.push([score, el]);
    }
    scored.sort((a, b) => b[0] - a[0]);
    return { lines: scored.slice(0, limit).map(([, el]) => "- " + describe(el)), count: scored.length };
  }

  function markdown(root) {
    const out = [];
    const inline = (el) => {
      let s = "";
      for (const node of el.childNodes) {
        if (node.nodeType === Node.TEXT_NODE) s += node.textContent;
        else if (node.nodeType === Node.ELEMENT_NODE && visible(node)) {
          if (node.tagName === "A" && node.getAttribute("href")) s += `[${clip(node.innerText, 200)}](${node.href})`;
          else if (node.tagName === "STRONG" || node.tagName === "B") s += `**${inline(node).trim()}**`;
          else if (node.tagName === "EM" || node.tagName === "I") s += `*${inline(node).trim()}*`;
          else if (node.tagName === "CODE") s += "`" + node.textContent + "`";
          else if (node.tagName === "BR") s += "\n";
          else s += inline(node);
        }
      }
      return s.replace(/[ \t]+/g, " ");
    };
    const block = (el) => {
      for (const child of el.children) {
        if (!visible(child) || ["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE"].includes(child.tagName)) continue;
        const tag = child.tagName;
        if (/^H[1-6]$/.test(tag)) out.push("#".repeat(Number(tag[1])) + " " + inline(child).trim());
        else if (tag === "P" || tag === "BLOCKQUOTE") out.push((tag === "BLOCKQUOTE" ? "> " : "") + inline(child).trim());
        else if (tag === "UL" || tag === "OL") {
          out.push([...child.children].filter((li) => li.tagName === "LI")
            .map((li, i) => (tag === "OL" ? `${i + 1}. ` : "- ") + inline(li).trim()).join("\n"));
        } else if (tag === "PRE") out.push("```\n" + child.innerText + "\n```");
        else if (tag === "IMG") out.push(`![${child.alt || ""}](${child.src})`);
        else if (tag === "TABLE") {
          [...child.rows].forEach((row, i) => {
            out.push("| " + [...row.cells].map((c) => clip(c.innerText, 80)).join(" | ") + " |");
            if (i === 0) out.push("|" + [...row.cells].map(() => " --- |").join(""));
          });
        } else if (child.children.length === 0) {
          const text = inline(child).trim();
          if (text) out.push(text);
        } else block(child);
      }
    };
    block(root);
    return out.filter((s) => s.trim()).join("\n\n");
  }

  // Whether a person sees the element (laid out, not display:none or visibility:hidden).
  // innerText of an element that is not rendered is its source text, scripts included.
  function rendered(el) {
    if (["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE"].includes(el.tagName)) return false;
    if (typeof el.checkVisibility === "function") {
      return el.checkVisibility({ checkOpacity: false, checkVisibilityCSS: true });
    }
    return !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  }

  // The text a person reads outside `main`, in document order, from the live page.
  function textAround(main, body) {
    const parts = [];
    const walk = (el) => {
      for (const node of el.childNodes) {
        if (node.nodeType === Node.TEXT_NODE) {
          const text = node.textContent.trim();
          if (text) parts.push(text);
        } else if (node.nodeType === Node.ELEMENT_NODE && node !== main) {
          if (node.contains(main)) walk(node);
          else if (rendered(node)) {
            const text = (node.innerText || "").trim();
            if (text) parts.push(text);
          }
        }
      }
    };
    if (rendered(body)) walk(body);
    return parts.join("\n");
  }

  function getText(format) {
    const main = document.querySelector("main, [role=main], article");
    const body = document.body || document.documentElement;
    if (format === "html") return (main || body).outerHTML;
    const render = (el) => (format === "markdown" ? markdown(el) : rendered(el) ? el.innerText : "");
    if (!main) return render(body);
    // Main content first, then whatever else the page shows.
    const restText = format === "markdown" ? "" : textAround(main, body);
    return render(main) + (restText.trim() ? "\n\n---\n\n" + restText.replace(/\n{3,}/g, "\n\n").trim() : "");
  }

  // Where the viewport is on the screen, as the window reports it (for screen coordinates).
  function geometry() {
    return { sx: screenX, sy: screenY, ow: outerWidth, oh: outerHeight, iw: innerWidth, ih: innerHeight,
             zoom: devicePixelRatio, shown: document.visibilityState === "visible", focused: document.hasFocus() };
  }

  // The part of an element's box inside the viewport, in CSS pixels; null when none is.
  function inView(el) {
    const r = el.getBoundingClientRect();
    const x = Math.max(0, r.left), y = Math.max(0, r.top);
    const right = Math.min(innerWidth, r.right), bottom = Math.min(innerHeight, r.bottom);
    return right - x >= 1 && bottom - y >= 1 ? { x, y, width: right - x, height: bottom - y } : null;
  }

  // The interactive elements a person can see now, top to bottom (screen.marks).
  function boxes(limit) {
    const out = [];
    for (const el of document.querySelectorAll("*")) {
      if (!interactive(el) || !visible(el)) continue;
      const box = inView(el);
      if (!box) continue;
      // Covered by something else (a dialog, a sticky header): a click would not reach it.
      const hit = document.elementFromPoint(box.x + box.width / 2, box.y + box.height / 2);
      if (hit && hit !== el && !el.contains(hit) && !hit.contains(el)) continue;
      out.push({ ref: refOf(el), role: role(el), name: name(el), box });
      if (out.length >= limit) break;
    }
    return { boxes: out, geometry: geometry() };
  }

  switch (args.op) {
    case "boxes": return boxes(args.limit);
    case "refBox": {
      const el = document.querySelector(`[${ATTR}="${args.ref}"]`);
      return el ? { box: inView(el), geometry: geometry() } : { stale: true };
    }
    case "geometry": return geometry();
    case "readPage": return readPage(args.filter, args.depth, args.ref, args.cap);
    case "find": return find(args.query, args.limit);
    case "getText": return { text: getText(args.format), title: document.title, url: location.href };
    case "refExists": return !!document.querySelector(`[${ATTR}="${args.ref}"]`);
  }
  throw new Error("unknown page reading " + args.op);
}
