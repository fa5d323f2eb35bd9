"""Prefect blocks: serving hosts (``HostBlock``, type ``roost-host``), model profiles
(``ModelProfileBlock``), Slack (``blocks.slack``), and the resolution that prefers a saved block
document over roost's built-ins (``blocks.resolve``).

``roost setup`` registers the block types and saves one document per built-in host and profile;
edit them in the Prefect UI (Blocks) or save new ones, and the next run uses them.
"""

from blocks.hosts import HostBlock
from blocks.profiles import ModelProfileBlock

__all__ = ["HostBlock", "ModelProfileBlock"]
