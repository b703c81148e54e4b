"""The PR bot, a wing of reports: the GitHub client, the artifact reader, annotations.

The bot reads the reports (the comparison, the renderer); nothing in the rest of
reports imports the bot.
"""
