from __future__ import annotations

from django.urls import path

from . import team_views, views

# Included under "knowledge/" by config/urls.py.
urlpatterns = [
    path("", views.knowledge_list, name="knowledge-list"),
    path("add/", views.knowledge_add, name="knowledge-add"),
    path("upload/", views.knowledge_upload, name="knowledge-upload"),
    path("<int:pk>/", views.knowledge_detail, name="knowledge-detail"),
    path("<int:pk>/delete/", views.knowledge_delete, name="knowledge-delete"),
]

# Included under "teams/" by config/urls.py.
team_urlpatterns = [
    path("", team_views.team_list, name="team-list"),
    path("<int:pk>/", team_views.team_detail, name="team-detail"),
    path(
        "<int:pk>/members/<int:user_id>/remove/",
        team_views.team_remove_member,
        name="team-remove-member",
    ),
]
