import { test } from 'node:test';
import assert from 'node:assert/strict';
import { scale, niceMax, maxOf, linePath, clock, timeTicks, tableRows } from './chart.js';

test('a scale maps the domain onto the range, y upside down as SVG wants it', () => {
  const y = scale([0, 10], [100, 0]);
  assert.equal(y(0), 100);
  assert.equal(y(10), 0);
  assert.equal(y(2.5), 75);
  assert.equal(scale([5, 5], [0, 50])(5), 0);
});

test('axis tops are 1, 2 or 5 times a power of ten, at least 1', () => {
  assert.deepEqual([0, 0.4, 1, 3, 7, 12, 20, 21, 480].map(niceMax), [1, 1, 1, 5, 10, 20, 20, 50, 500]);
  assert.equal(maxOf([{ a: 3, b: 9 }, { a: 4, b: null }], ['a']), 4);
  assert.equal(maxOf([], ['a']), 0);
});

test('a line breaks where a minute has no point, and replicas are drawn as steps', () => {
  const x = (t) => t - 1000;
  const y = (v) => 10 - v;
  const pts = [{ at: 1000, n: 1 }, { at: 1060, n: 3 }, { at: 1240, n: 2 }, { at: 1300, n: null }, { at: 1360, n: 0 }];
  assert.equal(linePath(pts, 'n', x, y, 60), 'M0 9 L60 7 M240 8 M360 10');
  assert.equal(linePath([{ at: 1000, n: 1 }, { at: 1060, n: 3 }], 'n', x, y, 60, { stepped: true }),
    'M0 9 H60 V7 H120');
  assert.equal(linePath([], 'n', x, y, 60), '');
});

test('times read as UTC hours and minutes; ticks fall on whole quarters or hours', () => {
  assert.equal(clock(1796083200 + 3661), '01:01');
  assert.deepEqual(timeTicks(0, 6 * 3600), [0, 7200, 14400, 21600]);
  assert.deepEqual(timeTicks(0, 3600), [0, 900, 1800, 2700, 3600]);
  assert.deepEqual(timeTicks(100, 400), [100, 400]);
});

test("the table lists the newest minute first, with a dash where a series has no value", () => {
  const rows = tableRows([{ at: 60, a: 1 }, { at: 120, a: 2, b: 5 }], [{ key: 'a' }, { key: 'b' }]);
  assert.deepEqual(rows, [{ at: 120, cells: [2, 5] }, { at: 60, cells: [1, '—'] }]);
});
