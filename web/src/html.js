// htm bound to Preact's h: tagged templates instead of JSX, no compile step.
import { h } from 'preact';
import htm from 'htm';

export const html = htm.bind(h);
