import { InvalidArgument } from "./errors.js";
/** The wire form of a duration; a bad one is refused naming `field`. */
export function formatDuration(d, field) {
    if (typeof d === "string") {
        parseDuration(d, field);
        return d;
    }
    if (typeof d !== "number" || !Number.isFinite(d) || d < 0) {
        throw new InvalidArgument(`must be a non-negative number of milliseconds or a Go duration string, got ${String(d)}`, { field });
    }
    // Go parses fractional units, so milliseconds go out as they are.
    return `${d}ms`;
}
/** The wire form of a time; a bad one is refused naming `field`. */
export function formatTime(t, field) {
    if (t instanceof Date) {
        if (Number.isNaN(t.getTime()))
            throw new InvalidArgument("invalid Date", { field });
        return t.toISOString();
    }
    if (typeof t !== "string" || Number.isNaN(Date.parse(t))) {
        throw new InvalidArgument(`must be a Date or an RFC 3339 time, got ${String(t)}`, { field });
    }
    return t;
}
const unitMs = {
    ns: 1e-6,
    us: 1e-3,
    "µs": 1e-3,
    "μs": 1e-3,
    ms: 1,
    s: 1000,
    m: 60_000,
    h: 3_600_000,
};
/** Milliseconds of a Go duration string (`"1m30s"`, `"-2.5h"`, `"0"`). */
export function parseDuration(s, field = "duration") {
    const bad = () => new InvalidArgument(`not a Go duration string (e.g. "10s", "1h30m"): ${JSON.stringify(s)}`, { field });
    if (typeof s !== "string")
        throw bad();
    let rest = s;
    let sign = 1;
    if (rest.startsWith("-") || rest.startsWith("+")) {
        if (rest[0] === "-")
            sign = -1;
        rest = rest.slice(1);
    }
    if (rest === "0")
        return 0;
    if (rest === "")
        throw bad();
    let total = 0;
    const part = /^(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)/;
    while (rest !== "") {
        const m = part.exec(rest);
        if (!m)
            throw bad();
        total += Number(m[1]) * unitMs[m[2]];
        rest = rest.slice(m[0].length);
    }
    return sign * total;
}
