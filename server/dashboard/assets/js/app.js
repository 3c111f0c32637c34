// Minimal bootstrap: lists queues. Replaced by the full app shortly.
const main = document.getElementById("main");
fetch("v1/queues").then(r => r.json()).then(d => {
  main.textContent = "";
  for (const q of d.queues || []) {
    const p = document.createElement("p");
    p.textContent = q.name;
    main.append(p);
  }
});
