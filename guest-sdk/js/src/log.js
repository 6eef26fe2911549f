// Log lines through the host: they land in its tracing output and in the
// run's events (rate-limited per instance). Outside a component, as in a
// plugin's unit tests, they go to standard error. The component entry
// (keel-guest/component/*.js) installs the host's sink.

export const LEVELS = Object.freeze(['trace', 'debug', 'info', 'warn', 'error']);

const stderr = (level, message) => {
  if (typeof console !== 'undefined') console.error(`[${level}] ${message}`);
};
let sink = stderr;

/** Sends every line to `fn(level, message)`; with no argument, back to standard error. */
export function setSink(fn = stderr) {
  sink = fn;
}

/** Sends `message` at `level` ('trace' ... 'error'). */
export function log(level, message) {
  if (!LEVELS.includes(level)) throw new RangeError(`log level ${JSON.stringify(level)} is not one of ${LEVELS.join(', ')}`);
  sink(level, String(message));
}

export const trace = (message) => log('trace', message);
export const debug = (message) => log('debug', message);
export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);
