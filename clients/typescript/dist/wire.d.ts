/**
 * A duration: a number of milliseconds, or a Go duration string as the API
 * writes them (`"10s"`, `"1h30m"`, `"250ms"`).
 */
export type Duration = number | string;
/** A time: a Date, or an RFC 3339 string. */
export type Time = Date | string;
/** The wire form of a duration; a bad one is refused naming `field`. */
export declare function formatDuration(d: Duration, field: string): string;
/** The wire form of a time; a bad one is refused naming `field`. */
export declare function formatTime(t: Time, field: string): string;
/** Milliseconds of a Go duration string (`"1m30s"`, `"-2.5h"`, `"0"`). */
export declare function parseDuration(s: string, field?: string): number;
