"""The component entry: componentize-py builds this module."""

import keel_guest as keel

from plugin import Plugin

WitWorld = keel.export_{{world}}(Plugin)
